// NetMocks: hand-written source of the swiftlike example's module NetMocks.
import Foundation
import Net

public enum NetMocksModule {
    public static let name = "NetMocks"
}
