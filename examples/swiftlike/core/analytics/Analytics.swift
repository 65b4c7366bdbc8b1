// Analytics: hand-written source of the swiftlike example's module Analytics.
import Foundation
import Log
import Net

public enum AnalyticsModule {
    public static let name = "Analytics"
}
