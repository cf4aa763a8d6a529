import FoundationEssentials
import HeraldAPNsBinary
import HeraldAPNsHTTP2
import HeraldCLI
import HeraldCore
import HeraldFCM
import HeraldHMS
import HeraldLocalTransport
import HeraldLogTransport
import HeraldOPPO
import HeraldVivo
import HeraldWebPush
import HeraldXiaomi

/// `herald-bench`: Herald's benchmarks and load clients, a binary of their own so that none of
/// them ships in `herald`. `scripts/bench.sh` (`make bench`) runs them next to reference tools.
///
/// To add a benchmark: a file in `Sources/HeraldBench` with a `HeraldCLI.Command` (its
/// `CommandSpec` path is the subcommand), one line in ``commands``, and, when it drives a plugin
/// not linked yet, that plugin in the target's dependencies and one line in ``registry``.
public enum HeraldBench {
    /// Every subcommand, in `--help` order.
    static let commands: [HeraldCLI.Command] = [
        BenchCommand.command,
        BroadcastBenchCommand.command,
        BinaryBenchmark.command,
        CryptoBenchCommand.command,
        StreamDaemonBench.command,
        StreamBench.http, StreamBench.client, StreamHubBench.command,
        WebPushBenchCommand.command,
        FCMBenchCommand.command,
        ChinaPushBenchCommand.command,
    ]

    /// The transport plugins the benchmarks build from a configuration.
    static var registry: TransportRegistry {
        var registry = TransportRegistry()
        registry.register(LogTransport.self)
        registry.register(LocalTransport.self)
        registry.register(APNsHTTP2Transport.self)
        registry.register(APNsBinaryTransport.self)
        registry.register(WebPushTransport.self)
        registry.register(FCMTransport.self)
        registry.register(HMSTransport.self)
        registry.register(XiaomiTransport.self)
        registry.register(OPPOTransport.self)
        registry.register(VivoTransport.self)
        return registry
    }

    static var overview: String {
        var text = """
        herald-bench \(HeraldCLI.version): Herald's benchmarks and load clients (make bench runs them all).

        Usage: herald-bench <benchmark> [options]

        Benchmarks:

        """
        let width = commands.map(\.spec.path.count).max() ?? 0
        for c in commands {
            text += "  \(c.spec.path)\(String(repeating: " ", count: width - c.spec.path.count + 2))\(c.spec.summary)\n"
        }
        return text + """

        The ones that start a daemon or a simulator run the herald beside this binary (or $HERALD).
        Run 'herald-bench <benchmark> --help' for its options.

        """
    }

    /// Runs the command line `arguments` (without the program name); returns the exit code.
    public static func run(_ arguments: [String],
                           environment: [String: String] = ProcessInfo.processInfo.environment) async -> Int32 {
        let context = CommandContext(registry: registry, storage: StorageDrivers(), environment: environment)
        return await HeraldCLI.dispatch(arguments, program: "herald-bench", commands: commands, overview: overview, context: context)
    }
}
