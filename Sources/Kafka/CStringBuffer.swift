import Foundation

/// A string a librdkafka function returns: an error code's name or text, a topic handle's name,
/// the version. The header documents each as always set, but Swift sees a pointer that may be
/// NULL; `fallback` stands in for one that ever were, where unwrapping it by force would stop
/// the worker over the words of a message.
func string(from pointer: UnsafePointer<CChar>?, or fallback: @autoclosure () -> String) -> String {
    pointer.map { String(cString: $0) } ?? fallback()
}

/// librdkafka reports errors into caller-provided char buffers.
func string(fromErrorBuffer buffer: [CChar]) -> String {
    let bytes = buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }
    return String(decoding: bytes, as: UTF8.self)
}
