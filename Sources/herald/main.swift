import FoundationEssentials
import Glibc
import HeraldAPNsBinary
import HeraldAPNsHTTP2
import HeraldCLI
import HeraldCore
import HeraldLogTransport

// Transport plugins are registered here, explicitly, once.
var registry = TransportRegistry()
registry.register(LogTransport.self)
registry.register(APNsHTTP2Transport.self)
registry.register(APNsBinaryTransport.self)

let code = await HeraldCLI.run(Array(CommandLine.arguments.dropFirst()), registry: registry)
exit(code)
