import FoundationEssentials
import Glibc
import HeraldAPNsBinary
import HeraldAPNsHTTP2
import HeraldCLI
import HeraldCore
import HeraldLogTransport
import HeraldPostgres
import HeraldStore

// Transport plugins and storage drivers are registered here, explicitly, once.
var registry = TransportRegistry()
registry.register(LogTransport.self)
registry.register(APNsHTTP2Transport.self)
registry.register(APNsBinaryTransport.self)

var storage = StorageDrivers()
storage.register(SQLiteStorageDriver())
storage.register(PostgresStorageDriver())

let code = await HeraldCLI.run(Array(CommandLine.arguments.dropFirst()), registry: registry, storage: storage)
exit(code)
