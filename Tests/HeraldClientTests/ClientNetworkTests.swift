import Testing

/// The client's tests that open connections (to the scripted contract server and to a real
/// daemon), one at a time: Foundation's URLSession on Linux (libcurl) has been seen to stall a
/// connection for seconds when several sessions open and cancel at once under load.
@Suite(.serialized) enum ClientNetworkTests {}
