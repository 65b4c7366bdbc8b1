// Settings: hand-written source of the swiftlike example's module Settings.
import Foundation
import Analytics
import Storage

public enum SettingsModule {
    public static let name = "Settings"
}
