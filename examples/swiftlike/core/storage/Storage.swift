// Storage: hand-written source of the swiftlike example's module Storage.
import Foundation
import Model
import Util

public enum StorageModule {
    public static let name = "Storage"
}
