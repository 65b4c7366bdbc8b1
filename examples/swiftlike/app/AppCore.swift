// AppCore: hand-written source of the swiftlike example's module AppCore.
import Foundation
import Analytics
import FeedData
import ProfileData
import SearchIndex
import Settings

public enum AppCoreModule {
    public static let name = "AppCore"
}
