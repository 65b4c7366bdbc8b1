// DesignSystem: hand-written source of the swiftlike example's module DesignSystem.
import Foundation
import Util

public enum DesignSystemModule {
    public static let name = "DesignSystem"
}
