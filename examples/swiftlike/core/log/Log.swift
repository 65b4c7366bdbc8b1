// Log: hand-written source of the swiftlike example's module Log.
import Foundation
import Base

public enum LogModule {
    public static let name = "Log"
}
