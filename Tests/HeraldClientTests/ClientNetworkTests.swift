import Testing

/// The client's tests that open connections (to the scripted contract server and to a real
/// daemon), one suite at a time: the tests' own API calls and the client's acknowledgements go
/// through Foundation's URLSession, which on Linux (libcurl) has been seen to stall a connection
/// for seconds when several sessions open and cancel at once under load. (The client's stream no
/// longer uses URLSession on Linux: ``SocketStreamConnection``.)
@Suite(.serialized) enum ClientNetworkTests {}
