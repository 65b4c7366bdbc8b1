// Net: hand-written source of the swiftlike example's module Net.
import Foundation
import Log
import Util

public enum NetModule {
    public static let name = "Net"
}
