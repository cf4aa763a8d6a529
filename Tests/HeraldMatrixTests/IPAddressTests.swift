import Foundation
import HeraldCore
import HeraldMatrix
import HeraldTestKit
import Testing

/// `IPAddress` and `IPNetwork`, which `matrix.allowedSources` and the per-source limits use.
@Suite struct IPAddressTests {
    @Test func parsesAndPrintsBothFamilies() throws {
        #expect(IPAddress("192.0.2.1")?.description == "192.0.2.1")
        #expect(IPAddress("192.0.2.1")?.isIPv4 == true)
        #expect(IPAddress("::ffff:192.0.2.1") == IPAddress("192.0.2.1"))
        #expect(IPAddress("2001:DB8::1")?.description == "2001:db8::1")
        #expect(IPAddress("2001:db8::1")?.isIPv4 == false)
        #expect(IPAddress("192.0.2") == nil && IPAddress("[::1]") == nil && IPAddress("") == nil && IPAddress("1.2.3.4/8") == nil)
    }

    @Test func networksContainWhatTheySay() throws {
        let v4 = try #require(IPNetwork("10.1.2.3/8"))
        #expect(v4.description == "10.0.0.0/8")
        #expect(v4.contains(IPAddress("10.255.0.1")!) && !v4.contains(IPAddress("11.0.0.1")!))
        #expect(v4.contains(IPAddress("::ffff:10.9.9.9")!))
        #expect(!v4.contains(IPAddress("::a01:203")!))  // IPv4-compatible, not IPv4-mapped: another address
        let host = try #require(IPNetwork("192.0.2.7"))
        #expect(host.prefixLength == 32 && host.contains(IPAddress("192.0.2.7")!) && !host.contains(IPAddress("192.0.2.8")!))
        let v6 = try #require(IPNetwork("2001:db8:abcd::/48"))
        #expect(v6.contains(IPAddress("2001:db8:abcd:12::1")!) && !v6.contains(IPAddress("2001:db8:abce::1")!))
        #expect(!v6.contains(IPAddress("10.0.0.1")!))
        let mapped = try #require(IPNetwork("::ffff:10.0.0.0/104"))
        #expect(mapped.contains(IPAddress("10.1.1.1")!) && !mapped.contains(IPAddress("11.1.1.1")!))
        #expect(IPNetwork("0.0.0.0/0")!.contains(IPAddress("203.0.113.9")!) && !IPNetwork("0.0.0.0/0")!.contains(IPAddress("::1")!))
        #expect(IPNetwork("::/0")!.contains(IPAddress("::1")!))
        for bad in ["10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8/8", "nowhere", "10.0.0.0/ 8"] {
            #expect(IPNetwork(bad) == nil, "\(bad)")
        }
    }

    @Test func clientPrefixIsTheAddressOrItsSlash64() {
        #expect(IPAddress("2001:db8:1:2:aaaa::1")!.clientPrefix == IPAddress("2001:db8:1:2::")!)
        #expect(IPAddress("2001:db8:1:2:aaaa::1")!.clientPrefix == IPAddress("2001:db8:1:2:ffff::9")!.clientPrefix)
        #expect(IPAddress("192.0.2.1")!.clientPrefix == IPAddress("192.0.2.1")!)
        #expect(IPAddress("192.0.2.1")!.clientPrefix != IPAddress("192.0.2.2")!.clientPrefix)
    }

    /// `matrix.allowedSources`, `maxRequestsPerSecondPerSource` and `maxDevicesPerApp`: read, with
    /// defaults, and errors that name the element.
    @Test func matrixLimitKeys() throws {
        let base = MatrixPayloadTests.baseConfig
        let m = try #require(try parse("{\(base), \"matrix\": {\"apps\": {\"x\": {\"app\": \"com.example.app\"}}}}").section(MatrixConfiguration.self))
        #expect(m.allowedSources == nil && m.maxRequestsPerSecondPerSource == 200 && m.maxDevicesPerApp == 100_000)
        #expect(m.allows(nil) && m.allows(IPAddress("203.0.113.1")))
        let set = try #require(try parse("""
            {\(base), "matrix": {"allowedSources": ["192.0.2.0/24", "2001:db8::/32"], "maxRequestsPerSecondPerSource": 50,
                                 "maxDevicesPerApp": 10, "apps": {"x": {"app": "com.example.app"}}}}
            """).section(MatrixConfiguration.self))
        #expect(set.allowedSources == [IPNetwork("192.0.2.0/24")!, IPNetwork("2001:db8::/32")!])
        #expect(set.maxRequestsPerSecondPerSource == 50 && set.maxDevicesPerApp == 10)
        #expect(set.allows(IPAddress("192.0.2.200")) && set.allows(IPAddress("2001:db8:5::1")))
        #expect(!set.allows(IPAddress("192.0.3.1")) && !set.allows(IPAddress("::1")) && !set.allows(nil))
        #expect(errors("{\(base), \"matrix\": {\"allowedSources\": [\"10.0.0.0/33\", 7], \"maxDevicesPerApp\": 0, \"apps\": {\"x\": {\"app\": \"com.example.app\"}}}}")
                == ["matrix.maxDevicesPerApp: must be between 1 and 100000000, found 0",
                    #"matrix.allowedSources[0]: expected an address or CIDR range such as "192.0.2.10", "10.0.0.0/8" or "2001:db8::/32", found "10.0.0.0/33""#,
                    "matrix.allowedSources[1]: expected a string, found a number"])
        #expect(errors("{\(base), \"matrix\": {\"allowedSources\": [], \"apps\": {\"x\": {\"app\": \"com.example.app\"}}}}")
                == ["matrix.allowedSources: must name at least one address or range (leave the key out to accept any source)"])
        #expect(errors("{\(base), \"matrix\": {\"allowedSources\": \"10.0.0.0/8\", \"apps\": {\"x\": {\"app\": \"com.example.app\"}}}}")
                == [#"matrix.allowedSources: expected an array of addresses or CIDR ranges such as ["10.0.0.0/8", "2001:db8::/32"], found a string"#])
    }
}
