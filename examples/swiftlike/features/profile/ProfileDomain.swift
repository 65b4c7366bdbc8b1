// ProfileDomain: hand-written source of the swiftlike example's module ProfileDomain.
import Foundation
import Model
import Net

public enum ProfileDomainModule {
    public static let name = "ProfileDomain"
}
