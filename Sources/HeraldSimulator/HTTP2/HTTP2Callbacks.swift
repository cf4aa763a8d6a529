internal import CNGHTTP2

/// The nghttp2 callbacks: capture nothing; the connection comes through `user_data` and each
/// stream's context through its stream user data, both borrowed (no retain/release per header).
enum HTTP2Callbacks {
    @inline(__always)
    static func withConnection<R>(_ userData: UnsafeMutableRawPointer?, _ body: (HTTP2Connection) -> R) -> R {
        Unmanaged<HTTP2Connection>.fromOpaque(userData!)._withUnsafeGuaranteedRef(body)
    }

    @inline(__always)
    static func withContext<R>(_ session: OpaquePointer?, _ streamID: Int32, _ body: (HTTP2StreamContext) -> R) -> R? {
        guard let raw = nghttp2_session_get_stream_user_data(session, streamID) else { return nil }
        return Unmanaged<HTTP2StreamContext>.fromOpaque(raw)._withUnsafeGuaranteedRef(body)
    }

    static let onBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
        guard let frame, herald_h2_is_request_headers(frame) != 0 else { return 0 }
        withConnection(userData) { $0.beginStream(herald_h2_frame_stream_id(frame)) }
        return 0
    }

    static let onHeader: nghttp2_on_header_callback = { session, frame, name, nameLength, value, valueLength, _, _ in
        guard let frame else { return 0 }
        _ = withContext(session, herald_h2_frame_stream_id(frame)) { context in
            context.request.append(name: UnsafeRawBufferPointer(start: name, count: nameLength),
                                   value: UnsafeRawBufferPointer(start: value, count: valueLength))
        }
        return 0
    }

    static let onDataChunk: nghttp2_on_data_chunk_recv_callback = { session, _, streamID, data, length, _ in
        _ = withContext(session, streamID) { context in
            context.request.appendBody(UnsafeRawBufferPointer(start: data, count: length))
        }
        return 0
    }

    static let onFrameRecv: nghttp2_on_frame_recv_callback = { session, frame, userData in
        guard let frame, herald_h2_ends_stream(frame) != 0 else { return 0 }
        _ = withContext(session, herald_h2_frame_stream_id(frame)) { context in
            guard context.inUse else { return }
            withConnection(userData) { $0.requestComplete(context) }
        }
        return 0
    }

    static let onStreamClose: nghttp2_on_stream_close_callback = { session, streamID, _, userData in
        _ = withContext(session, streamID) { context in
            withConnection(userData) { $0.streamClosed(context) }
        }
        return 0
    }

    static let readBody: nghttp2_data_source_read_callback = { session, streamID, buffer, length, flags, _, _ in
        withContext(session, streamID) { context in
            let (n, done) = context.readBody(into: buffer!, length: length)
            if done { flags!.pointee |= herald_h2_data_flag_eof() }
            return n
        } ?? Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
    }
}
