// StorageMigrations: hand-written source of the swiftlike example's module StorageMigrations.
import Foundation
import Storage

public enum StorageMigrationsModule {
    public static let name = "StorageMigrations"
}
