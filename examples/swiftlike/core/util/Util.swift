// Util: hand-written source of the swiftlike example's module Util.
import Foundation
import Base
import Log

public enum UtilModule {
    public static let name = "Util"
}
