// ProfileData: hand-written source of the swiftlike example's module ProfileData.
import Foundation
import ProfileDomain
import Storage

public enum ProfileDataModule {
    public static let name = "ProfileData"
}
