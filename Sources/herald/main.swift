import FoundationEssentials
import Glibc
import HeraldAPNsBinary
import HeraldAPNsHTTP2
import HeraldCLI
import HeraldCore
import HeraldEvents
import HeraldFCM
import HeraldGorush
import HeraldHMS
import HeraldLocalTransport
import HeraldLogTransport
import HeraldMatrix
import HeraldOPPO
import HeraldPostgres
import HeraldServer
import HeraldSQLite
import HeraldVivo
import HeraldWebPush
import HeraldXiaomi

// A parent may start us with signals blocked (a thread of a thread pool blocks nearly all, and a
// child inherits its spawner's mask): unblock the ones Herald acts on before any thread starts,
// or SIGTERM would never reach `herald serve`.
var handled = sigset_t()
sigemptyset(&handled)
for s in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&handled, s) }
pthread_sigmask(SIG_UNBLOCK, &handled, nil)

// Transport plugins, front ends (and their configuration sections) and storage drivers are registered here, explicitly, once.
var registry = TransportRegistry()
registry.register(section: MatrixConfiguration.self)
registry.register(section: GorushConfiguration.self)
registry.register(section: WebhooksConfiguration.self)
registry.register(section: EventsConfiguration.self)
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

// Each driver reads its own keys of the `storage` section (its `Section`, registered with it).
var storage = StorageDrivers()
storage.register(SQLiteStorageDriver())
storage.register(PostgresStorageDriver())

let frontEnds: [any FrontEnd.Type] = [MatrixGateway.self, GorushGateway.self]

let code = await HeraldCLI.run(Array(CommandLine.arguments.dropFirst()), registry: registry, storage: storage, frontEnds: frontEnds)
exit(code)
