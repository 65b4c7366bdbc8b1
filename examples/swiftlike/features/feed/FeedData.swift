// FeedData: hand-written source of the swiftlike example's module FeedData.
import Foundation
import FeedDomain
import StorageMigrations

public enum FeedDataModule {
    public static let name = "FeedData"
}
