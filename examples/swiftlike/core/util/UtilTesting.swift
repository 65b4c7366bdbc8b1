// UtilTesting: hand-written source of the swiftlike example's module UtilTesting.
import Foundation
import Util

public enum UtilTestingModule {
    public static let name = "UtilTesting"
}
