// Model: hand-written source of the swiftlike example's module Model.
import Foundation
import Util

public enum ModelModule {
    public static let name = "Model"
}
