import Foundation
import Testing
import TrackingDomain

@Suite("JSON writer")
struct JSONWriterTests {
    @Test("writes nested objects with commas in the right places, and a line per record")
    func structure() {
        var writer = JSONWriter()
        writer.beginObject()
        writer.key("a"); writer.int(Int64(-12))
        writer.key("b"); writer.null()
        writer.key("c"); writer.beginObject(); writer.key("d"); writer.string("e"); writer.key("e"); writer.beginObject(); writer.endObject(); writer.endObject()
        writer.key("f"); writer.int(1)
        writer.endObject()
        writer.endLine()
        writer.beginObject(); writer.key("g"); writer.int(2); writer.endObject()
        #expect(writer.string == #"{"a":-12,"b":null,"c":{"d":"e","e":{}},"f":1}"# + "\n" + #"{"g":2}"#)
    }

    @Test("strings are escaped so that any text round-trips through a JSON parser")
    func escaping() throws {
        let nasty = "quote\" backslash\\ newline\n tab\t nul\u{0} bell\u{7} unit\u{1F} del\u{7F} é 😀 \u{2028}"
        var writer = JSONWriter()
        writer.beginObject(); writer.key(nasty); writer.string(nasty); writer.endObject()
        let parsed = try JSONSerialization.jsonObject(with: Data(writer.bytes)) as? [String: String]
        #expect(parsed == [nasty: nasty])
        #expect(writer.string.contains(#"\u0000"#) && writer.string.contains(#"\n"#))
    }

    @Test("integers cover the whole Int64 range")
    func integers() {
        var writer = JSONWriter()
        writer.beginObject()
        for value in [Int64.min, -1, 0, 7, Int64.max] { writer.key("v"); writer.int(value) }
        writer.endObject()
        #expect(writer.string == #"{"v":-9223372036854775808,"v":-1,"v":0,"v":7,"v":9223372036854775807}"#)
    }

    @Test("removeAll starts a fresh record")
    func reuse() {
        var writer = JSONWriter(capacity: 64)
        writer.beginObject(); writer.key("x"); writer.int(1); writer.endObject()
        writer.removeAll()
        writer.beginObject(); writer.key("y"); writer.int(2); writer.endObject()
        #expect(writer.string == #"{"y":2}"#)
    }

    @Test("events and verdicts write the documented line formats")
    func verdictLines() {
        let event = TrackingEvent(deliveryId: "d57fd6", broadlogId: "h1685a5", action: .click, channel: .push,
                                  platform: .android, eventTime: nil, shape: .androidPush)
        #expect(Verdict.accepted(event).jsonLine == #"{"status":"ok","event":{"deliveryId":"d57fd6","broadlogId":"h1685a5","action":"click","channel":"push","platform":"android","eventTime":null,"shape":"android_push"}}"#)
        #expect(Verdict.filtered(.trackingOff).jsonLine == #"{"status":"filtered","reason":"tracking_off"}"#)
        #expect(Verdict.rejected(.unknownAction, detail: "\"x\"").jsonLine == #"{"status":"rejected","reason":"unknown_action","detail":"unknown_action: \"x\""}"#)
    }
}
