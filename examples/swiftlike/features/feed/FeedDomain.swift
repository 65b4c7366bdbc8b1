// FeedDomain: hand-written source of the swiftlike example's module FeedDomain.
import Foundation
import Model
import Net
import Storage

public enum FeedDomainModule {
    public static let name = "FeedDomain"
}
