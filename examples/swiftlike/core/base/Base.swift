// Base: hand-written source of the swiftlike example's module Base.
import Foundation

public enum BaseModule {
    public static let name = "Base"
}
