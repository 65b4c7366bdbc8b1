// SearchDomain: hand-written source of the swiftlike example's module SearchDomain.
import Foundation
import Model
import Net

public enum SearchDomainModule {
    public static let name = "SearchDomain"
}
