// App: hand-written source of the swiftlike example's module App.
import Foundation
import AppCore
import DesignSystem

public enum AppModule {
    public static let name = "App"
}
