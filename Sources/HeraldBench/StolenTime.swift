import FoundationEssentials
import Glibc

/// CPU time the hypervisor gave to other guests while this machine's vCPUs wanted to run
/// (`steal` in `/proc/stat`, all CPUs together): on a shared virtual machine the same run can be
/// tens of milliseconds slower for it, so the stream benchmarks print it beside their figures.
enum StolenTime {
    /// Milliseconds stolen since boot (0 where `/proc/stat` has no such field).
    static func milliseconds() -> Double {
        guard let data = FileManager.default.contents(atPath: "/proc/stat") else { return 0 }
        // "cpu  user nice system idle iowait irq softirq steal ...": the first line sums all CPUs.
        let first = String(decoding: data.prefix { $0 != 10 }, as: UTF8.self).split(separator: " ")
        guard first.first == "cpu", first.count > 8, let steal = Double(first[8]) else { return 0 }
        return steal * 1000 / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
