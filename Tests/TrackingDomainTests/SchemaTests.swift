import Foundation
import Testing
import TrackingDomain

/// The published JSON Schemas (`schemas/`) must describe what the normalizer actually reads and
/// writes: every golden input it accepts is a valid raw hit, every event and output line it
/// writes is valid, and the schemas are not vacuous (they reject what the contract rejects).
@Suite("JSON Schemas")
struct SchemaTests {
    static let schemasDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("schemas")

    static func schema(_ name: String) throws -> SchemaValidator {
        let data = try Data(contentsOf: schemasDirectory.appendingPathComponent(name))
        return SchemaValidator(root: try JSONSerialization.jsonObject(with: data))
    }

    static func json(_ bytes: [UInt8]) -> Any? {
        try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
    }

    @Test("every golden input that is accepted or filtered is a valid raw hit")
    func goldenInputsMatchRawHitSchema() throws {
        let rawHit = try Self.schema("raw-hit.schema.json")
        var checked = 0
        for golden in GoldenCase.all {
            guard let status = golden.expectedObject?["status"] as? String, status != "rejected" else { continue }
            let document = try #require(Self.json(golden.input), "\(golden.relativePath) is not JSON")
            let errors = rawHit.validate(document)
            #expect(errors.isEmpty, "\(golden.relativePath): \(errors)")
            checked += 1
        }
        #expect(checked > 60)
    }

    @Test("the raw hit schema rejects hits the contract rejects for their structure")
    func rawHitSchemaIsNotVacuous() throws {
        let rawHit = try Self.schema("raw-hit.schema.json")
        let structural: Set<String> = ["not_an_object", "missing_delivery_id", "missing_broadlog_id", "not_a_tracking_action"]
        var checked = 0
        for golden in GoldenCase.all {
            guard let reason = golden.expectedObject?["reason"] as? String, structural.contains(reason),
                  let document = Self.json(golden.input) else { continue }
            #expect(!rawHit.validate(document).isEmpty, "\(golden.relativePath) (\(reason)) should not be a valid raw hit")
            checked += 1
        }
        #expect(checked >= 15)
        #expect(!rawHit.validate(["action": "3", "deliveryId": "d", "broadlogId": "b"]).isEmpty)
        #expect(!rawHit.validate(["url": "https://t.example.com/r/?id=h1,d1"]).isEmpty)
        #expect(!rawHit.validate(["action": "7", "deliveryId": "d", "broadlogId": "b", "timestamp": "2026-11-22T10:00:00"]).isEmpty)
    }

    @Test("every accepted golden event is a valid tracking event, and every golden line a valid output line")
    func goldenOutputsMatchSchemas() throws {
        let event = try Self.schema("tracking-event.schema.json")
        let line = try Self.schema("normalize-line.schema.json")
        var events = 0
        for golden in GoldenCase.all {
            let object = try #require(golden.expectedObject, "\(golden.relativePath).expected.json is not JSON")
            #expect(line.validate(object).isEmpty, "\(golden.relativePath): \(line.validate(object))")
            if let accepted = object["event"] {
                #expect(event.validate(accepted).isEmpty, "\(golden.relativePath): \(event.validate(accepted))")
                events += 1
            }
        }
        #expect(events > 50)
        #expect(!event.validate(["deliveryId": "d", "broadlogId": "b", "action": "dismiss", "channel": "push",
                                 "platform": "ios", "eventTime": NSNull(), "shape": "ios_push"]).isEmpty)
        #expect(!line.validate(["status": "rejected", "reason": "tracking_off", "detail": "x"]).isEmpty)
    }

    @Test("the aggregate schema accepts the record of spec section 5 and rejects broken ones")
    func aggregateSchema() throws {
        let aggregate = try Self.schema("aggregate.schema.json")
        let record: [String: Any] = [
            "deliveryId": "d57fd6", "windowStart": RFC3339.format(epochMillis: 1_795_341_600_000),
            "windowEnd": RFC3339.format(epochMillis: 1_795_341_660_000),
            "impressions": 3, "clicks": 2, "opens": 1, "uniqueImpressions": 2, "uniqueClicks": 2, "uniqueOpens": 1,
            "dismissals": 1, "revision": 1,
            "channels": ["push": 5, "local": 1, "unknown": 0], "platforms": ["ios": 2, "android": 4, "unknown": 0],
        ]
        #expect(aggregate.validate(record).isEmpty, "\(aggregate.validate(record))")
        var broken = record; broken["revision"] = 0
        #expect(!aggregate.validate(broken).isEmpty)
        broken = record; broken["windowStart"] = "2026-11-22T11:00:00+01:00"
        #expect(!aggregate.validate(broken).isEmpty, "window bounds are UTC")
        broken = record; broken["channels"] = ["push": 5, "local": 1]
        #expect(!aggregate.validate(broken).isEmpty)
        broken = record; broken.removeValue(forKey: "dismissals")
        #expect(!aggregate.validate(broken).isEmpty)
    }
}

/// A compact validator for the subset of JSON Schema 2020-12 the project's schemas use:
/// type, properties, required, additionalProperties, enum, const, pattern, minimum, maximum,
/// minLength, allOf, anyOf, oneOf, not, and `$ref` to `#/$defs/...`. Numbers follow JSON Schema
/// semantics (7.0 is an integer). Returns error strings with JSON-pointer-like paths.
struct SchemaValidator {
    let root: Any

    func validate(_ value: Any) -> [String] {
        var errors: [String] = []
        check(value, against: root, path: "$", errors: &errors)
        return errors
    }

    private func resolve(_ reference: String) -> Any? {
        guard reference.hasPrefix("#/") else { return nil }
        var node: Any? = root
        for part in reference.dropFirst(2).split(separator: "/") {
            node = (node as? [String: Any])?[String(part)]
        }
        return node
    }

    private static func typeName(_ value: Any) -> String {
        switch value {
        case is NSNull: return "null"
        case is String: return "string"
        case is [Any]: return "array"
        case is [String: Any]: return "object"
        case let number as NSNumber:
            if String(describing: type(of: number)).contains("Boolean") || value is Bool && String(cString: number.objCType) == "c" {
                return "boolean"
            }
            return number.doubleValue.rounded() == number.doubleValue ? "integer" : "number"
        default: return "unknown"
        }
    }

    private static func equal(_ a: Any, _ b: Any) -> Bool {
        let ta = typeName(a), tb = typeName(b)
        let numeric: Set<String> = ["integer", "number"]
        if numeric.contains(ta) && numeric.contains(tb) { return (a as! NSNumber).doubleValue == (b as! NSNumber).doubleValue }
        guard ta == tb else { return false }
        switch ta {
        case "null": return true
        case "string": return a as! String == b as! String
        case "boolean": return (a as! NSNumber).boolValue == (b as! NSNumber).boolValue
        default: return NSDictionary(dictionary: ["v": a]).isEqual(to: ["v": b])
        }
    }

    private func check(_ value: Any, against schemaNode: Any, path: String, errors: inout [String]) {
        if let boolean = schemaNode as? Bool, Self.typeName(schemaNode) == "boolean" {
            if !boolean { errors.append("\(path): not allowed") }
            return
        }
        guard let schema = schemaNode as? [String: Any] else { errors.append("\(path): bad schema"); return }
        let type = Self.typeName(value)

        if let reference = schema["$ref"] as? String {
            if let target = resolve(reference) { check(value, against: target, path: path, errors: &errors) }
            else { errors.append("\(path): unresolvable \(reference)") }
        }
        if let expected = schema["type"] {
            let allowed = (expected as? [String]) ?? [expected as? String ?? ""]
            if !(allowed.contains(type) || (type == "integer" && allowed.contains("number"))) {
                errors.append("\(path): is \(type), expected \(allowed.joined(separator: "|"))")
            }
        }
        if let options = schema["enum"] as? [Any], !options.contains(where: { Self.equal($0, value) }) {
            errors.append("\(path): not one of the allowed values")
        }
        if let constant = schema["const"], !Self.equal(constant, value) {
            errors.append("\(path): not the constant \(constant)")
        }
        if let string = value as? String, type == "string" {
            if let minLength = schema["minLength"] as? Int, string.count < minLength {
                errors.append("\(path): shorter than \(minLength)")
            }
            if let pattern = schema["pattern"] as? String {
                let regex = try! NSRegularExpression(pattern: pattern)
                if regex.firstMatch(in: string, range: NSRange(string.startIndex..., in: string)) == nil {
                    errors.append("\(path): does not match \(pattern)")
                }
            }
        }
        if let number = value as? NSNumber, type == "integer" || type == "number" {
            if let minimum = schema["minimum"] as? NSNumber, number.doubleValue < minimum.doubleValue {
                errors.append("\(path): below \(minimum)")
            }
            if let maximum = schema["maximum"] as? NSNumber, number.doubleValue > maximum.doubleValue {
                errors.append("\(path): above \(maximum)")
            }
        }
        if let object = value as? [String: Any], type == "object" {
            for case let name as String in (schema["required"] as? [Any]) ?? [] where object[name] == nil {
                errors.append("\(path): missing \(name)")
            }
            let properties = schema["properties"] as? [String: Any] ?? [:]
            for (name, member) in object {
                if let propertySchema = properties[name] {
                    check(member, against: propertySchema, path: "\(path).\(name)", errors: &errors)
                } else if let additional = schema["additionalProperties"] {
                    check(member, against: additional, path: "\(path).\(name)", errors: &errors)
                }
            }
        }
        if let all = schema["allOf"] as? [Any] {
            for sub in all { check(value, against: sub, path: path, errors: &errors) }
        }
        if let any = schema["anyOf"] as? [Any] {
            if !any.contains(where: { sub in var e: [String] = []; check(value, against: sub, path: path, errors: &e); return e.isEmpty }) {
                errors.append("\(path): matches none of anyOf")
            }
        }
        if let one = schema["oneOf"] as? [Any] {
            let matches = one.filter { sub in var e: [String] = []; check(value, against: sub, path: path, errors: &e); return e.isEmpty }.count
            if matches != 1 { errors.append("\(path): matches \(matches) of oneOf, expected exactly 1") }
        }
        if let negated = schema["not"] {
            var e: [String] = []
            check(value, against: negated, path: path, errors: &e)
            if e.isEmpty { errors.append("\(path): matches a schema it must not") }
        }
    }
}
