// SearchIndex: hand-written source of the swiftlike example's module SearchIndex.
import Foundation
import SearchDomain
import Storage

public enum SearchIndexModule {
    public static let name = "SearchIndex"
}
