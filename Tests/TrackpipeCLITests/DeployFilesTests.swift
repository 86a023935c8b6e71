#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import ArgumentParser
import Foundation
import Logging
@testable import Pipeline
@testable import Runner
import Testing
import TrackpipeTestSupport
import Yams

@testable import TrackpipeCLI

/// The deploy files (Dockerfile, docker-compose, Kubernetes manifests) are configuration no
/// compiler reads, and there is no Docker engine or cluster here to run them. These tests
/// hold them to the program instead: every variable they set is one `trackpipe run` reads,
/// every value parses the way the worker parses it, topic names and the metrics port agree
/// across files, and the commands they run are real subcommands with real flags. The worker
/// runs as several instances (two compose services, Kubernetes replicas), so the files are
/// also held to what that needs: the repartition topic created like the input, every
/// instance scraped, one rebalance at a time, and notes that name both consumer groups.
@Suite struct DeployFilesTests {
    @Test func everyYAMLFileUnderDeployParsesAndEveryManifestIsNamed() throws {
        let files = try DeployFiles.yamlFiles()
        let names = Set(files.map { DeployFiles.relative($0) })
        for expected in [
            "deploy/docker-compose.yml", "deploy/prometheus/prometheus.yml", "deploy/prometheus/alerts.yml",
            "deploy/prometheus/alerts.test.yml", "deploy/grafana/provisioning/datasources/prometheus.yml",
            "deploy/grafana/provisioning/dashboards/trackpipe.yml", "deploy/k8s/configmap.yaml",
            "deploy/k8s/secret.example.yaml", "deploy/k8s/deployment.yaml", "deploy/k8s/pdb.yaml", "deploy/k8s/service.yaml",
            "deploy/k8s/static-membership/statefulset.yaml", "deploy/k8s/servicemonitor.yaml", "deploy/k8s/prometheusrule.yaml",
            "deploy/k8s/backfill/job.yaml",
        ] {
            #expect(names.contains(expected), "missing \(expected)")
        }
        var kinds: Set<String> = []
        for file in files {
            let documents = try DeployFiles.documents(file)
            #expect(!documents.isEmpty, "\(DeployFiles.relative(file)) holds no YAML document")
            for document in documents {
                #expect(document.mapping != nil, "\(DeployFiles.relative(file)): a document is not a mapping")
            }
            guard DeployFiles.relative(file).hasPrefix("deploy/k8s/") else { continue }
            for (index, manifest) in documents.enumerated() {
                let place = "\(DeployFiles.relative(file)) document \(index + 1)"
                #expect(manifest["apiVersion"].string?.isEmpty == false, "\(place): no apiVersion")
                #expect(manifest["metadata"]["name"].string?.isEmpty == false, "\(place): no metadata.name")
                if let kind = manifest["kind"].string { kinds.insert(kind) } else { Issue.record("\(place): no kind") }
            }
        }
        #expect(kinds == ["ConfigMap", "Secret", "Deployment", "PodDisruptionBudget", "Service", "StatefulSet", "Job", "ServiceMonitor", "PrometheusRule"])
    }

    @Test func everyTrackpipeVariableSetInDeployIsOneTheProgramReads() throws {
        let known = Environment.knownVariables
        func isRead(_ name: String) -> Bool { known.contains(name) || name.hasPrefix("TRACKPIPE_X_") }

        // The variables each file sets, by where they are set.
        var settings: [(place: String, names: [String])] = []
        settings.append(("Dockerfile ENV", Array(try Dockerfile.load().runtimeEnvironment.keys)))
        let compose = try DeployFiles.compose()
        for (service, definition) in compose["services"].mapping ?? [:] {
            settings.append(("compose service \(service)", Array(DeployFiles.environment(of: YAMLNode(definition)).keys)))
        }
        let configMapData = try DeployFiles.manifest(kind: "ConfigMap")["data"].mapping ?? [:]
        settings.append(("ConfigMap data", Array(configMapData.keys)))
        let secret = try DeployFiles.manifest(kind: "Secret")
        let secretData = secret["stringData"].mapping ?? secret["data"].mapping ?? [:]
        settings.append(("Secret stringData", Array(secretData.keys)))
        settings.append(("Deployment env", Array(try DeployFiles.deploymentEnvironment().keys)))
        settings.append(("Job env", Array(try DeployFiles.literalEnvironment(DeployFiles.workerContainer(DeployFiles.manifest(kind: "Job"))).keys)))

        var checked = 0
        for (place, names) in settings {
            for name in names where name.hasPrefix("TRACKPIPE_") {
                checked += 1
                #expect(isRead(name), "\(place) sets \(name), which trackpipe never reads")
            }
        }
        #expect(checked >= 20, "expected the deploy files to configure the worker through TRACKPIPE_* variables")

        // Mentioned anywhere (comments, the HEALTHCHECK script, the notes, docs/deploy.md):
        // a misspelled variable in the instructions is as wrong as one in a manifest.
        let pattern = try NSRegularExpression(pattern: "TRACKPIPE_[A-Z0-9][A-Z0-9_]*")
        for file in try DeployFiles.allFiles() + [DeployFiles.root.appendingPathComponent("docs/deploy.md")] {
            let text = try String(contentsOf: file, encoding: .utf8)
            for match in pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                let name = String(text[Range(match.range, in: text)!])
                #expect(isRead(name), "\(DeployFiles.relative(file)) mentions \(name), which trackpipe never reads")
            }
        }
    }

    @Test func everyWorkerEnvironmentResolvesLikeTheWorkerResolvesIt() throws {
        // The exact code path `trackpipe run` takes at start-up: a value it would refuse
        // (a duration without unit, a bad log level, automatic commits) fails here.
        let image = try Dockerfile.load().runtimeEnvironment
        let kubernetes = try DeployFiles.kubernetesEnvironment()
        var environments = [("Dockerfile", image)]
        for (service, _) in try DeployFiles.workerServices() {
            environments.append(("compose \(service)", try DeployFiles.workerEnvironment(service)))
        }
        environments.append(("Kubernetes", image.merging(kubernetes) { $1 }))
        #expect(environments.count >= 3, "the Dockerfile, the compose workers, Kubernetes")
        for (place, variables) in environments {
            #expect(throws: Never.self, "\(place) environment") {
                let resolved = try RunCommand.parse([]).resolve(Environment(variables))
                #expect(resolved.metricsPort > 0, "\(place): /metrics and /health must be on")
                #expect(resolved.logFormat == .json, "\(place): log collectors expect JSON")
                // The generator (and most producers) key the input by device: counts are exact
                // only through the repartition stage.
                #expect(!resolved.config.inputKeyedByDelivery, "\(place): the input is not keyed by deliveryId")
            }
        }
        // The ConfigMap's own security: PLAINTEXT, with or without the (optional) Secret.
        let plain = try RunCommand.parse([]).resolve(Environment(image.merging(try DeployFiles.kubernetesEnvironment(secret: false)) { $1 }))
        #expect(plain.config.kafkaProperties["security.protocol"] == "PLAINTEXT")
        #expect(plain.config.kafkaProperties["sasl.password"] == nil)
        // Its commented SASL example, with the example Secret: what the notes tell users to do.
        var sasl = image.merging(kubernetes) { $1 }
        sasl["TRACKPIPE_X"] = try DeployFiles.commentedSASLExample()
        let resolved = try RunCommand.parse([]).resolve(Environment(sasl))
        #expect(resolved.config.kafkaProperties["security.protocol"] == "SASL_SSL")
        #expect(resolved.config.kafkaProperties["sasl.mechanism"] == "SCRAM-SHA-512")
        #expect(resolved.config.kafkaProperties["sasl.username"] != nil, "each TRACKPIPE_X_* Secret key becomes one property")
        #expect(resolved.config.kafkaProperties["sasl.password"] != nil)
    }

    /// A cluster without authentication needs no Secret: the pods must start without one. The
    /// ConfigMap's default security is PLAINTEXT, with SASL as a commented example only.
    @Test func kubernetesSecretIsOptionalAndTheConfigMapDefaultsToPlaintext() throws {
        for (file, kind) in [
            ("deploy/k8s/deployment.yaml", "Deployment"), ("deploy/k8s/static-membership/statefulset.yaml", "StatefulSet"),
            ("deploy/k8s/backfill/job.yaml", "Job"),
        ] {
            let manifest = try #require(try DeployFiles.documents(DeployFiles.root.appendingPathComponent(file)).first { $0["kind"].string == kind })
            let sources = (try DeployFiles.workerContainer(manifest)["envFrom"].sequence ?? []).map(YAMLNode.init)
            let secrets = sources.filter { $0["secretRef"].mapping != nil }
            #expect(!secrets.isEmpty, "\(file) reads the credentials Secret")
            for secret in secrets { #expect(secret["secretRef"]["optional"].value as? Bool == true, "\(file): secretRef optional: true") }
            for configMap in sources where configMap["configMapRef"].mapping != nil {
                #expect(configMap["configMapRef"]["optional"].value as? Bool != true, "\(file): the ConfigMap is required")
            }
        }
        let data = try DeployFiles.manifest(kind: "ConfigMap")["data"]
        let security = try #require(data["TRACKPIPE_X"].string)
        #expect(!security.contains("SASL"), "the ConfigMap's default is no SASL: \(security)")
        #expect(try DeployFiles.commentedSASLExample().contains("security.protocol=SASL_SSL"))
    }

    /// The PrometheusRule is alerts.yml for the Prometheus Operator: the same groups, rule for
    /// rule (alerts.yml is what promtool tests).
    @Test func prometheusRuleHoldsExactlyTheAlertRulesOfAlertsYml() throws {
        let rule = try DeployFiles.manifest(kind: "PrometheusRule")
        #expect(rule["apiVersion"].string == "monitoring.coreos.com/v1")
        let alerts = try DeployFiles.yaml("deploy/prometheus/alerts.yml")
        #expect(rule["spec"]["groups"].canonical == alerts["groups"].canonical, "deploy/k8s/prometheusrule.yaml differs from alerts.yml: copy its groups again")
        #expect((rule["spec"]["groups"].sequence ?? []).count >= 1)
    }

    /// The ServiceMonitor scrapes every pod behind the metrics Service, under the job name the
    /// alert rules select, often enough for a failed worker's last scrape.
    @Test func serviceMonitorScrapesEveryPodUnderTheJobTheRulesSelect() throws {
        let monitor = try DeployFiles.manifest(kind: "ServiceMonitor")
        let service = try DeployFiles.manifest(kind: "Service")
        let serviceLabels = service["metadata"]["labels"].mapping?.mapValues { "\($0)" } ?? [:]
        let wanted = monitor["spec"]["selector"]["matchLabels"].mapping?.mapValues { "\($0)" } ?? [:]
        #expect(!wanted.isEmpty && wanted.allSatisfy { serviceLabels[$0.key] == $0.value }, "the ServiceMonitor selects the Service trackpipe-metrics")
        let portNames = (service["spec"]["ports"].sequence ?? []).compactMap { YAMLNode($0)["name"].string }
        let endpoints = (monitor["spec"]["endpoints"].sequence ?? []).map(YAMLNode.init)
        #expect(endpoints.count == 1)
        let endpoint = try #require(endpoints.first)
        #expect(portNames.contains(endpoint["port"].string ?? ""), "the endpoint names the Service's port")
        #expect(endpoint["path"].string == "/metrics")
        let interval = try DurationText.milliseconds(try #require(endpoint["interval"].string))
        #expect(Double(interval) / 1000 < MetricsEndpoint.maxLinger, "a failed worker waits at most \(MetricsEndpoint.maxLinger) s for its last scrape")
        // The job label: the value of the Service's label jobLabel names, else the Service's name.
        let job = monitor["spec"]["jobLabel"].string.flatMap { serviceLabels[$0] } ?? service["metadata"]["name"].string
        let rules = try DeployFiles.text("deploy/prometheus/alerts.yml")
        #expect(job == "trackpipe" && rules.contains("job=\"\(job ?? "")\""), "the rules select job=\"trackpipe\"; the ServiceMonitor gives \(job ?? "none")")
    }

    /// The backfill Job is `run --until-end` under groups and internal topics of its own (the
    /// live aggregate stage must not read its events), into an output of its own, bounded in
    /// time and retries, and never retrying a configuration error or lost input.
    @Test func backfillJobRunsABoundedCountUnderGroupsAndTopicsOfItsOwn() throws {
        let job = try DeployFiles.manifest(kind: "Job")
        let topLevel = try FileManager.default.contentsOfDirectory(atPath: DeployFiles.deploy.appendingPathComponent("k8s").path)
        #expect(!topLevel.contains("job.yaml"), "kubectl apply -f deploy/k8s/ must not start the Job")
        let spec = job["spec"]
        #expect((spec["backoffLimit"].int ?? 0) >= 1)
        #expect((spec["activeDeadlineSeconds"].int ?? 0) > 0)
        #expect(spec["template"]["spec"]["restartPolicy"].string == "Never", "podFailurePolicy needs restartPolicy Never")
        let rules = (spec["podFailurePolicy"]["rules"].sequence ?? []).map(YAMLNode.init)
        let failFast = rules.filter { $0["action"].string == "FailJob" }.flatMap { ($0["onExitCodes"]["values"].sequence ?? []).compactMap { $0 as? Int } }
        #expect(Set(failFast) == [64, Int(RunCommand.lostInputExitCode)], "exit 64 and 65 end the Job without a retry: \(failFast)")
        let container = try DeployFiles.workerContainer(job)
        #expect(rules.allSatisfy { $0["onExitCodes"]["containerName"].string == container["name"].string })
        let args = (container["args"].sequence ?? []).map { "\($0)" }
        #expect(args.first == "run")
        let image = try Dockerfile.load().runtimeEnvironment
        var environment = image.merging(try DeployFiles.kubernetesEnvironment(secret: false)) { $1 }
        environment.merge(try DeployFiles.literalEnvironment(container)) { $1 }
        let backfill = try RunCommand.parse(Array(args.dropFirst())).resolve(Environment(environment)).config
        let live = try RunCommand.parse([]).resolve(Environment(image.merging(try DeployFiles.kubernetesEnvironment()) { $1 })).config
        #expect(backfill.untilEnd && backfill.connectTimeout != nil, "a bounded run, which gives up on an unreachable cluster")
        #expect(backfill.group != live.group && backfill.aggregateGroup != live.aggregateGroup)
        #expect(backfill.effectiveRepartitionTopic != live.effectiveRepartitionTopic, "the live aggregate stage would count the backfill's events")
        #expect(backfill.effectiveStateTopic != live.effectiveStateTopic)
        #expect(backfill.outputTopics != live.outputTopics)
        // Not one of the Deployment's pods: the Service and the PDB select those by label.
        let labels = spec["template"]["metadata"]["labels"].mapping?.mapValues { "\($0)" } ?? [:]
        let selector = try DeployFiles.manifest(kind: "Service")["spec"]["selector"].mapping?.mapValues { "\($0)" } ?? [:]
        #expect(!selector.allSatisfy { labels[$0.key] == $0.value }, "the metrics Service must not select the Job's pod")
        #expect(try DeployFiles.text("deploy/k8s/README.md").contains("backfill/job.yaml"))
    }

    /// The notes' table lists every manifest under deploy/k8s.
    @Test func kubernetesNotesListEveryManifest() throws {
        let notes = try DeployFiles.text("deploy/k8s/README.md")
        for file in try DeployFiles.yamlFiles() where DeployFiles.relative(file).hasPrefix("deploy/k8s/") {
            let name = String(DeployFiles.relative(file).dropFirst("deploy/k8s/".count))
            #expect(notes.contains("| `\(name)` |"), "deploy/k8s/README.md's table does not list \(name)")
        }
    }

    @Test func topicNamesAgreeWithTheProgramDefaultsEverywhere() throws {
        let defaults = PipelineConfig()
        let resolvedDefaults = try RunCommand.parse([]).resolve(Environment([:])).config
        // The run command's own fallbacks must be the pipeline's defaults the files rely on.
        #expect(resolvedDefaults.inputTopic == defaults.inputTopic)
        #expect(resolvedDefaults.outputTopics == defaults.outputTopics)
        #expect(resolvedDefaults.deadLetterTopic == defaults.deadLetterTopic)

        #expect(resolvedDefaults.effectiveRepartitionTopic == defaults.effectiveRepartitionTopic)

        let expected = [
            "TRACKPIPE_INPUT_TOPIC": defaults.inputTopic, "TRACKPIPE_OUTPUT_TOPIC": defaults.outputTopics[0],
            "TRACKPIPE_DLQ_TOPIC": defaults.deadLetterTopic, "TRACKPIPE_REPARTITION_TOPIC": defaults.effectiveRepartitionTopic,
            "TRACKPIPE_STATE_TOPIC": defaults.effectiveStateTopic,
        ]
        let compose = try DeployFiles.compose()
        let workers = try DeployFiles.workerServices()
        let configMap = try DeployFiles.manifest(kind: "ConfigMap")["data"]
        for (name, topic) in expected {
            for (service, definition) in workers {
                #expect(DeployFiles.environment(of: definition)[name] == topic, "compose \(service) \(name)")
            }
            #expect(configMap[name].string == topic, "ConfigMap \(name)")
        }

        let created = try DeployFiles.createdTopics(compose)
        let repartition = defaults.effectiveRepartitionTopic
        let state = defaults.effectiveStateTopic
        #expect(Set(created.keys) == [defaults.inputTopic, defaults.outputTopics[0], defaults.deadLetterTopic, repartition, state])
        // The state topic: one partition per repartition partition (each window task keeps its
        // state in the partition of its own number), compacted, no time-based retention.
        #expect(created[state]?.partitions == created[repartition]?.partitions, "\(state) must have as many partitions as \(repartition)")
        #expect(created[state]?.configs.contains("cleanup.policy=compact") == true, "\(state): cleanup.policy=compact")
        #expect(created[state]?.configs.contains { $0.hasPrefix("retention.ms=") } == false, "\(state): no time-based retention")
        // Compaction keeps the last record per <deliveryId>@<windowStart>: the full counts.
        #expect(created[defaults.outputTopics[0]]?.configs.contains("cleanup.policy=compact") == true)
        #expect(created[defaults.inputTopic]?.configs.contains("cleanup.policy=compact") == false)
        for (topic, settings) in created {
            #expect(settings.partitions ?? 0 >= 1, "\(topic): --partitions")
        }

        // The repartition topic: as many partitions as the input (the worker's own choice when
        // it creates the topic; fewer would cap the aggregate stage below the normalize stage),
        // deleted by time, never compacted (its keys are deliveries: compaction would drop
        // events), and kept longer than --retention (comfortably more than the aggregate
        // group's lag and an outage).
        let inputPartitions = try #require(created[defaults.inputTopic]?.partitions, "\(defaults.inputTopic) --partitions")
        #expect(created[repartition]?.partitions == inputPartitions, "\(repartition) must have \(inputPartitions) partitions, like \(defaults.inputTopic)")
        let repartitionConfigs = created[repartition]?.configs ?? []
        #expect(repartitionConfigs.contains("cleanup.policy=delete"), "\(repartition): cleanup.policy=delete, explicitly")
        let retention = repartitionConfigs.first { $0.hasPrefix("retention.ms=") }.flatMap { Int64($0.dropFirst("retention.ms=".count)) }
        #expect(retention != nil, "\(repartition): an explicit retention.ms")
        // Exactly as the worker would create it: the week's backstop, and segments a purge frees.
        let asWorker = Set(Pipeline.repartitionTopicConfig.map { "\($0.key)=\($0.value)" })
        #expect(Set(repartitionConfigs) == asWorker, "\(repartition): \(repartitionConfigs.sorted()), the worker creates it with \(asWorker.sorted())")
        for (service, _) in workers {
            // What each instance actually resolves, so the variable is proven to be read.
            let config = try RunCommand.parse([]).resolve(Environment(DeployFiles.workerEnvironment(service))).config
            #expect(config.effectiveRepartitionTopic == repartition, "compose \(service) uses the repartition topic the topics job creates")
            #expect(config.effectiveStateTopic == state, "compose \(service) uses the state topic the topics job creates")
            #expect(created[config.inputTopic] != nil, "compose \(service) reads a topic the topics job creates")
            #expect((retention ?? 0) > config.window.retention, "\(repartition) retention.ms must exceed \(service)'s --retention")
        }

        let generator = try DeployFiles.generatorCommand()
        #expect(generator.topic == defaults.inputTopic, "the generator must feed the worker's input topic")
        for (service, definition) in workers {
            #expect(generator.brokers == DeployFiles.environment(of: definition)["TRACKPIPE_BROKERS"], "the generator and \(service) must use the same Kafka")
        }
    }

    @Test func configMapDurationsParseAndKeepRetentionAtLeastGrace() throws {
        let data = try DeployFiles.manifest(kind: "ConfigMap")["data"]
        var milliseconds: [String: Int64] = [:]
        for flag in ["window", "grace", "retention", "idle-timeout", "commit-interval"] {
            let name = Environment.variableName(forFlag: flag)
            guard let text = data[name].string else {
                Issue.record("ConfigMap has no \(name)")
                continue
            }
            let value = try DurationText.milliseconds(text)
            #expect(value > 0, "\(name)=\(text)")
            milliseconds[flag] = value
        }
        if let retention = milliseconds["retention"], let grace = milliseconds["grace"] {
            #expect(retention >= grace, "a window must be retained until it is emitted")
        }
        // Durations written as strings in YAML: an unquoted 60 would be a number without unit.
        for (name, value) in data.mapping ?? [:] {
            #expect(value is String, "ConfigMap \(name) must be a quoted string (Kubernetes refuses other types)")
        }
    }

    @Test func metricsPortAndHealthPathAreTheSameInEveryFile() throws {
        let dockerfile = try Dockerfile.load()
        guard let portText = dockerfile.runtimeEnvironment["TRACKPIPE_METRICS_PORT"], let port = Int(portText), port > 0 else {
            Issue.record("the Dockerfile must set TRACKPIPE_METRICS_PORT to a port number")
            return
        }
        #expect(dockerfile.runtime(.expose).flatMap { $0.split(separator: " ") }.contains { $0.hasPrefix("\(port)") })
        let healthcheck = dockerfile.runtime(.healthcheck).joined(separator: " ")
        #expect(healthcheck.contains("/health/live "), "HEALTHCHECK must GET /health/live: an unhealthy container may be replaced, and only a stuck worker should be")
        #expect(healthcheck.contains("${TRACKPIPE_METRICS_PORT}") || healthcheck.contains("/\(port)"), "HEALTHCHECK port")

        let workers = try DeployFiles.workerServices()
        for (service, worker) in workers {
            #expect(DeployFiles.environment(of: worker)["TRACKPIPE_METRICS_PORT"] == "\(port)", "compose \(service) TRACKPIPE_METRICS_PORT")
            let published = DeployFiles.publishedPorts(worker).map { $0.container }
            #expect(published.contains("\(port)"), "compose \(service) publishes its metrics port")
            let test = (worker["healthcheck"]["test"].sequence ?? []).map { "\($0)" }.joined(separator: " ")
            #expect(test.contains("/health/live ") && test.contains("/\(port) "), "compose \(service) checks /health/live on its metrics port: \(test)")
        }

        // Every instance is a target of its own: each reports only the partitions it owns.
        let prometheus = try DeployFiles.yaml("deploy/prometheus/prometheus.yml")
        let jobs = prometheus["scrape_configs"].sequence ?? []
        let targets = jobs.flatMap { job in
            (YAMLNode(job)["static_configs"].sequence ?? []).flatMap { (YAMLNode($0)["targets"].sequence ?? []).map { "\($0)" } }
        }
        #expect(targets.sorted() == workers.map { "\($0.name):\(port)" }.sorted(), "Prometheus scrapes every compose worker instance on the metrics port")
        #expect(jobs.allSatisfy { YAMLNode($0)["metrics_path"].string ?? "/metrics" == "/metrics" })

        let deployment = try DeployFiles.manifest(kind: "Deployment")
        let container = try DeployFiles.workerContainer(deployment)
        #expect(try DeployFiles.deploymentEnvironment()["TRACKPIPE_METRICS_PORT"] == "\(port)")
        let containerPorts = (container["ports"].sequence ?? []).map(YAMLNode.init)
        #expect(containerPorts.contains { $0["name"].string == "metrics" && $0["containerPort"].int == port })
        for (probe, path) in [("readinessProbe", "/health/ready"), ("livenessProbe", "/health/live")] {
            let get = container[probe]["httpGet"]
            #expect(get["path"].string == path, "\(probe) path")
            #expect(get["port"].int == port || get["port"].string == "metrics", "\(probe) port")
        }
        #expect(deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"].string == "\(port)")

        let service = try DeployFiles.manifest(kind: "Service")
        let servicePorts = (service["spec"]["ports"].sequence ?? []).map(YAMLNode.init)
        #expect(servicePorts.contains { $0["name"].string == "metrics" && ($0["targetPort"].int == port || $0["targetPort"].string == "metrics") })
    }

    @Test func composePrometheusLoadsTheAlertRulesAndGrafanaShowsTheDashboard() throws {
        let services = try DeployFiles.compose()["services"]
        let config = try DeployFiles.yaml("deploy/prometheus/prometheus.yml")
        // The alerts select job="trackpipe": the scrape job must carry that name.
        #expect((config["scrape_configs"].sequence ?? []).map { YAMLNode($0)["job_name"].string } == ["trackpipe"])
        let ruleFiles = (config["rule_files"].sequence ?? []).map { "\($0)" }
        #expect(ruleFiles == ["alerts.yml"], "prometheus.yml loads the alert rules")

        // What each compose service mounts, as container path -> file or folder under deploy/.
        func mounts(_ service: String) -> [String: String] {
            var result: [String: String] = [:]
            for entry in services[service]["volumes"].sequence ?? [] {
                let parts = "\(entry)".split(separator: ":").map(String.init)
                guard parts.count >= 2, parts[0].hasPrefix("./") else { continue }
                result[parts[1]] = "deploy/" + parts[0].dropFirst(2)
            }
            return result
        }
        let prometheus = mounts("prometheus")
        #expect(prometheus["/etc/prometheus/prometheus.yml"] == "deploy/prometheus/prometheus.yml")
        for file in ruleFiles {
            #expect(prometheus["/etc/prometheus/\(file)"] == "deploy/prometheus/\(file)", "the rule file \(file) is mounted beside the config")
        }

        // Grafana: the provisioning folder, and the dashboards where the provider looks.
        let grafana = mounts("grafana")
        #expect(grafana["/etc/grafana/provisioning"] == "deploy/grafana/provisioning")
        let provider = try DeployFiles.yaml("deploy/grafana/provisioning/dashboards/trackpipe.yml")
        let path = try #require((provider["providers"].sequence ?? []).first.map { YAMLNode($0)["options"]["path"].string } ?? nil)
        let dashboards = try #require(grafana[path], "grafana mounts nothing at the provider's path \(path)")
        #expect(FileManager.default.fileExists(atPath: DeployFiles.root.appendingPathComponent(dashboards + "/trackpipe.json").path))
        let home = DeployFiles.environment(of: services["grafana"])["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] ?? ""
        #expect(home == path + "/trackpipe.json", "the home dashboard is the trackpipe dashboard")
        // The data source is the compose Prometheus, on the port it serves.
        let source = try DeployFiles.yaml("deploy/grafana/provisioning/datasources/prometheus.yml")
        let url = (source["datasources"].sequence ?? []).first.map { YAMLNode($0)["url"].string } ?? nil
        #expect(url == "http://prometheus:9090")
        #expect(DeployFiles.publishedPorts(services["prometheus"]).contains { $0.container == "9090" })
        #expect(services["grafana"]["depends_on"].sequence?.contains { "\($0)" == "prometheus" } == true)
    }

    @Test func metricsServerAnswersTheHealthPathsTheProbesUse() throws {
        let healthy = try MetricsServer(
            host: "127.0.0.1", port: 0, logger: Logger(label: "test"), metrics: { Array("trackpipe_up 1\n".utf8) },
            health: { _ in nil })
        defer { healthy.stop() }
        for path in ["/health", "/health/live", "/health/ready"] {
            let health = try HTTPGet.fetch(port: healthy.port, path: path)
            #expect(health.status == 200, "\(path)")
            #expect(health.body == "ok\n", "\(path)")
        }
        let metrics = try HTTPGet.fetch(port: healthy.port, path: "/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.body.contains("trackpipe_up 1"))

        // Waiting out a Kafka outage: live, not ready; /health is readiness.
        let waiting = try MetricsServer(
            host: "127.0.0.1", port: 0, logger: Logger(label: "test"), metrics: { [] },
            health: { $0 == .live ? nil : "no Kafka broker at kafka:9092 has answered for 75 s" })
        defer { waiting.stop() }
        #expect(try HTTPGet.fetch(port: waiting.port, path: "/health/live").status == 200)
        for path in ["/health", "/health/ready"] {
            let answer = try HTTPGet.fetch(port: waiting.port, path: path)
            #expect(answer.status == 503, "\(path)")
            #expect(answer.body == "not ready: no Kafka broker at kafka:9092 has answered for 75 s\n", "\(path)")
        }

        let stuck = try MetricsServer(
            host: "127.0.0.1", port: 0, logger: Logger(label: "test"), metrics: { [] },
            health: { _ in "the consume loop has not turned for over 60 s" })
        defer { stuck.stop() }
        let unhealthy = try HTTPGet.fetch(port: stuck.port, path: "/health/live")
        #expect(unhealthy.status == 503)
        #expect(unhealthy.body.contains("not live: the consume loop"))
    }

    @Test func dockerHealthcheckCommandPassesOnlyWhileTheWorkerIsHealthy() throws {
        // Runs the HEALTHCHECK's own command (as Docker would, with the image's environment)
        // against a real MetricsServer: it must pass on 200 and fail on 503.
        let command = try Dockerfile.load().healthcheckCommand()
        try #require(!command.isEmpty, "HEALTHCHECK must use the exec form CMD [...]")
        let healthy = try MetricsServer(
            host: "127.0.0.1", port: 0, logger: Logger(label: "test"), metrics: { [] }, health: { $0 == .live ? nil : "no broker" })
        defer { healthy.stop() }
        let stuck = try MetricsServer(
            host: "127.0.0.1", port: 0, logger: Logger(label: "test"), metrics: { [] }, health: { _ in "delivery failed" })
        defer { stuck.stop() }
        #expect(try Self.exitStatus(command, port: healthy.port) == 0)
        #expect(try Self.exitStatus(command, port: stuck.port) != 0)
    }

    @Test func dockerfileBuildsStaticallyAndRunsTheWorkerAsNonRoot() throws {
        let dockerfile = try Dockerfile.load()
        let stages = dockerfile.stages
        try #require(stages.count >= 2, "multi-stage: a Swift build stage and a slim runtime stage")
        let builder = stages[0].from
        #expect(builder.hasPrefix("swift:") && builder.contains("bookworm"), "build stage FROM \(builder)")
        if let swiftVersion = dockerfile.globalArguments["SWIFT_VERSION"] {
            #expect(builder.contains("${SWIFT_VERSION}"))
            let parts = swiftVersion.split(separator: ".").compactMap { Int($0) }
            #expect(parts.count >= 2 && (parts[0], parts[1]) >= (6, 2), "swift-prometheus 2.4.1 needs Swift 6.2")
        } else {
            Issue.record("the Swift version must be an ARG SWIFT_VERSION")
        }
        let build = stages[0].instructions.map(\.arguments).joined(separator: "\n")
        #expect(build.contains("librdkafka-dev") && build.contains("pkg-config"))
        #expect(build.contains("--static-swift-stdlib") && build.contains("--product trackpipe"))
        #expect(build.contains("swift package resolve"))

        #expect(stages.last?.from == "debian:bookworm-slim")
        let runs = dockerfile.runtime(.run).joined(separator: "\n")
        #expect(runs.contains("librdkafka1") && runs.contains("ca-certificates"))
        #expect(!runs.contains("curl"), "the HEALTHCHECK uses bash's /dev/tcp; no HTTP client is installed")
        #expect(dockerfile.runtime(.copy).contains { $0.contains("--from=") && $0.contains("trackpipe") })

        let user = dockerfile.runtime(.user).last ?? "root"
        let uid = user.split(separator: ":").first.map(String.init) ?? ""
        #expect(!["root", "0", ""].contains(uid), "USER must not be root")
        #expect(Int(uid) != nil, "a numeric USER lets Kubernetes' runAsNonRoot check it")
        #expect(try DeployFiles.manifest(kind: "Deployment")["spec"]["template"]["spec"]["securityContext"]["runAsUser"].int == Int(uid))

        let entrypoint = try dockerfile.execForm(.entrypoint)
        let command = try dockerfile.execForm(.cmd)
        #expect(entrypoint == ["trackpipe"])
        #expect(command == ["run"])
        #expect(throws: Never.self) { _ = try Trackpipe.parseAsRoot(command) }
        #expect(dockerfile.runtime(.stopsignal) == ["SIGTERM"])
        #expect(dockerfile.runtime(.healthcheck).joined().contains("/health/live"))

        // The build context is the repository root: what the Dockerfile copies must not be
        // ignored, and the build directories must be.
        let ignored = Set(try String(contentsOf: DeployFiles.root.appendingPathComponent(".dockerignore"), encoding: .utf8)
            .split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && !$0.hasPrefix("#") })
        #expect(ignored.contains(".build") && ignored.contains(".git"))
        #expect(ignored.contains { $0.hasPrefix(".build-") || $0.hasPrefix(".build*") }, "the scratch paths (.build-*) too")
        for source in dockerfile.stages[0].instructions.filter({ $0.keyword == .copy }).flatMap({ $0.arguments.split(separator: " ").dropLast() }) {
            let top = source.split(separator: "/").first.map(String.init) ?? String(source)
            #expect(!ignored.contains(top) && !ignored.contains(String(source)), ".dockerignore excludes \(source), which the Dockerfile copies")
        }
    }

    @Test func composeGeneratorRunsARealGenerateCommandThatFollowsTheWallClock() throws {
        // The image's entrypoint runs the command: no shell in between, so SIGTERM from
        // `docker compose stop` reaches trackpipe, which flushes and exits 0.
        let service = try DeployFiles.compose()["services"]["generator"]
        #expect(service["entrypoint"].value == nil, "the generator must use the image's entrypoint (trackpipe), not a shell")
        #expect(try Dockerfile.load().execForm(.entrypoint) == ["trackpipe"])
        let arguments = try DeployFiles.generatorArguments()
        for shell in ["bash", "sh", "-c", "while", "sleep", "date"] {
            #expect(!arguments.contains(shell), "no shell loop: the generator runs `trackpipe \(arguments.joined(separator: " "))`")
        }
        #expect(!arguments.contains { $0.contains("$") }, "no shell variables")

        // Event time must follow the wall clock, or windows never close on time: live mode
        // paces the hits by the clock, for as long as the stack runs.
        let generator = try DeployFiles.generatorCommand()
        let rate = try #require(generator.rate, "the generator must run in live mode (--rate)")
        #expect(rate > 0)
        #expect(generator.count == nil, "a --count would stop the generator, and the windows with it")
        #expect(generator.start == nil && generator.span == nil)
        for (service, definition) in try DeployFiles.workerServices() {
            let worker = DeployFiles.environment(of: definition)
            #expect(generator.brokers == worker["TRACKPIPE_BROKERS"], "\(service)")
            #expect(generator.topic == worker["TRACKPIPE_INPUT_TOPIC"], "\(service)")
        }
    }

    @Test func composeStartsEachServiceOnlyWhenWhatItNeedsIsReady() throws {
        let services = try DeployFiles.compose()["services"]
        #expect(services["kafka"]["healthcheck"]["test"].sequence != nil, "Kafka needs a healthcheck for service_healthy")
        #expect(services["topics"]["depends_on"]["kafka"]["condition"].string == "service_healthy")
        for service in try DeployFiles.workerServices().map({ $0.name }) + ["generator"] {
            #expect(services[service]["depends_on"]["topics"]["condition"].string == "service_completed_successfully", "\(service)")
            #expect(services[service]["build"]["dockerfile"].string == "deploy/Dockerfile", "\(service) builds the image")
            #expect(services[service]["build"]["context"].string == "..", "\(service): the context is the repository root")
        }
        let kafka = services["kafka"]
        let advertised = DeployFiles.environment(of: kafka)["KAFKA_ADVERTISED_LISTENERS"] ?? ""
        #expect(advertised.contains("://kafka:9092") && advertised.contains("://localhost:9094"))
        #expect((kafka["ports"].sequence ?? []).contains { "\($0)" == "9094:9094" }, "kcat on the host uses localhost:9094")
        #expect(services["topics"]["command"].sequence?.first.map { "\($0)" }?.contains("--if-not-exists") == true)
    }

    @Test func composeRunsTheWorkerAsSeveralInstancesOfOneDeployment() throws {
        // Several instances, as the worker is deployed: they share the groups and topics, and
        // the repartition stage keeps the counts exact.
        let compose = try DeployFiles.compose()
        let workers = try DeployFiles.workerServices()
        let instances = workers.map { $0.definition["deploy"]["replicas"].int ?? 1 }.reduce(0, +)
        #expect(instances >= 2, "the compose stack runs more than one worker instance")
        var shapes: Set<String> = []
        for (service, _) in workers {
            let config = try RunCommand.parse([]).resolve(Environment(DeployFiles.workerEnvironment(service))).config
            shapes.insert(
                [config.brokers, config.group, config.aggregateGroup, config.inputTopic, config.effectiveRepartitionTopic,
                    config.outputTopics[0], config.deadLetterTopic, "\(config.window)", "\(config.maxFutureSkew)"].joined(separator: " "))
        }
        #expect(shapes.count == 1, "every instance must be configured alike (groups, topics, windows): \(shapes)")

        // A host port can be published once: replicas of one service cannot share a fixed one,
        // and two services cannot publish the same.
        var publishers: [String: [String]] = [:]
        for (service, definition) in compose["services"].mapping ?? [:] {
            let node = YAMLNode(definition)
            let replicas = node["deploy"]["replicas"].int ?? 1
            for port in DeployFiles.publishedPorts(node) {
                publishers[port.host, default: []].append(service)
                if replicas > 1 && !port.host.isEmpty && !port.host.contains("-") {
                    Issue.record("\(service): \(replicas) replicas cannot all publish host port \(port.host)")
                }
            }
        }
        for (port, services) in publishers where !port.isEmpty && services.count > 1 {
            Issue.record("host port \(port) is published by \(services.sorted()): only one can have it")
        }
    }

    @Test func kubernetesRunsSeveralReplicasReplacedOneAtATime() throws {
        let deployment = try DeployFiles.manifest(kind: "Deployment")
        let spec = deployment["spec"]
        let replicas = try #require(spec["replicas"].int, "the Deployment sets replicas")
        #expect(replicas > 1, "several replicas: the repartition stage keeps the counts exact")
        #expect(spec["strategy"]["type"].string == "RollingUpdate", "pods are replaced one by one, never all at once")

        // Each pod joining or leaving is a rebalance: one change at a time, chosen explicitly
        // (Kubernetes' 25% defaults round differently for each replica count).
        let rolling = spec["strategy"]["rollingUpdate"]
        let surge = DeployFiles.podCount(rolling["maxSurge"], of: replicas, roundingUp: true)
        let unavailable = DeployFiles.podCount(rolling["maxUnavailable"], of: replicas, roundingUp: false)
        let both = try #require(surge.flatMap { surge in unavailable.map { (surge, $0) } }, "maxSurge and maxUnavailable set explicitly")
        #expect(both.0 + both.1 >= 1, "Kubernetes refuses a rolling update that may neither add nor remove a pod")
        #expect(both.0 <= 1 && both.1 <= 1, "one pod change, one rebalance, at a time")

        // Drains: one pod at a time too, and never every pod.
        let budget = try DeployFiles.manifest(kind: "PodDisruptionBudget")["spec"]
        #expect(budget["minAvailable"].value == nil, "minAvailable would not follow the replica count")
        let evictable = try #require(DeployFiles.podCount(budget["maxUnavailable"], of: replicas, roundingUp: true), "PDB maxUnavailable")
        #expect(evictable >= 1 && evictable < replicas, "the PDB lets drains proceed, one pod at a time, and keeps some up")
        let podLabels = spec["template"]["metadata"]["labels"].mapping?.mapValues { "\($0)" } ?? [:]
        for selector in [spec["selector"]["matchLabels"], budget["selector"]["matchLabels"]] {
            let wanted = selector.mapping?.mapValues { "\($0)" } ?? [:]
            #expect(!wanted.isEmpty && wanted.allSatisfy { podLabels[$0.key] == $0.value }, "selectors match the pods' labels")
        }
    }

    /// The StatefulSet variant (static membership) is the Deployment's pod with a stable
    /// identity: the same pod template plus TRACKPIPE_INSTANCE_ID from the pod's name, outside
    /// the folder `kubectl apply -f deploy/k8s/` applies, so that the two never run together.
    @Test func kubernetesStatefulSetGivesEachPodAStaticMemberIdAndOtherwiseRunsTheDeploymentsPod() throws {
        let statefulSetFile = "deploy/k8s/static-membership/statefulset.yaml"
        let documents = try DeployFiles.documents(DeployFiles.root.appendingPathComponent(statefulSetFile))
        let statefulSet = try #require(documents.first { $0["kind"].string == "StatefulSet" }, "\(statefulSetFile) holds a StatefulSet")
        let deployment = try DeployFiles.manifest(kind: "Deployment")
        let topLevel = try FileManager.default.contentsOfDirectory(atPath: DeployFiles.deploy.appendingPathComponent("k8s").path)
        #expect(!topLevel.contains("statefulset.yaml"), "kubectl apply -f deploy/k8s/ must not start a StatefulSet next to the Deployment")

        let spec = statefulSet["spec"]
        #expect(spec["replicas"].int == deployment["spec"]["replicas"].int)
        #expect(spec["selector"].canonical == deployment["spec"]["selector"].canonical, "the PDB and the Service select its pods as the Deployment's")
        #expect(spec["serviceName"].string == (try DeployFiles.manifest(kind: "Service"))["metadata"]["name"].string)

        // The pod template: the Deployment's, but for the worker container's two extra variables.
        var container = try DeployFiles.workerContainer(statefulSet).mapping ?? [:]
        let env = (YAMLNode(container["env"] as Any).sequence ?? []).map(YAMLNode.init)
        let extra = env.filter { ["TRACKPIPE_INSTANCE_ID", "TRACKPIPE_X_SESSION_TIMEOUT"].contains($0["name"].string ?? "") }
        #expect(extra.count == 2, "TRACKPIPE_INSTANCE_ID and TRACKPIPE_X_SESSION_TIMEOUT are set")
        let instance = try #require(extra.first { $0["name"].string == "TRACKPIPE_INSTANCE_ID" })
        #expect(instance["valueFrom"]["fieldRef"]["fieldPath"].string == "metadata.name", "each pod's id is its stable name")
        let session = try #require(extra.first { $0["name"].string == "TRACKPIPE_X_SESSION_TIMEOUT" }?["value"].string)
        container["env"] = env.filter { extra.map(\.canonical).contains($0.canonical) == false }.map(\.value)
        var template = spec["template"].mapping ?? [:]
        var podSpec = YAMLNode(template["spec"] as Any).mapping ?? [:]
        podSpec["containers"] = [container]
        template["spec"] = podSpec
        #expect(YAMLNode(template).canonical == deployment["spec"]["template"].canonical, "the pod template differs from deployment.yaml's beyond the two variables")

        // What the worker makes of it, with the ConfigMap and Secret: two stages, two ids.
        var variables = try DeployFiles.kubernetesEnvironment()
        variables["TRACKPIPE_INSTANCE_ID"] = "trackpipe-0"
        variables["TRACKPIPE_X_SESSION_TIMEOUT"] = session
        let resolved = try RunCommand.parse([]).resolve(Environment(variables))
        #expect(resolved.config.staticMemberId(stage: "normalize") == "trackpipe-0-normalize")
        #expect(resolved.config.staticMemberId(stage: "aggregate") == "trackpipe-0-aggregate")
        #expect(resolved.config.kafkaProperties["session.timeout.ms"].flatMap(Int.init).map { $0 >= 30_000 } == true, "room for a pod to restart")
        #expect(try DeployFiles.text("docs/deploy.md").contains(statefulSetFile), "docs/deploy.md says how to use it")
    }

    /// compose keeps Kafka's log on a named volume at the directory the image's user owns, so a
    /// plain `down` and `up` keep the topics, commits and window state.
    @Test func composeKafkaKeepsItsLogOnANamedVolume() throws {
        let compose = try DeployFiles.compose()
        let kafka = compose["services"]["kafka"]
        let logDirs = try #require(DeployFiles.environment(of: kafka)["KAFKA_LOG_DIRS"], "KAFKA_LOG_DIRS is set explicitly")
        let mounts = (kafka["volumes"].sequence ?? []).compactMap { YAMLNode($0).scalarText }
        let named = Set((compose["volumes"].mapping ?? [:]).keys)
        let mount = try #require(mounts.first { $0.split(separator: ":").dropFirst().first.map(String.init) == logDirs }, "a volume at \(logDirs): \(mounts)")
        let source = String(mount.split(separator: ":")[0])
        #expect(named.contains(source), "\(source) is a named volume declared at the top level (not a bind mount or an anonymous volume)")
        // The apache/kafka image's own data directory, owned by its non-root user: a volume
        // elsewhere would be created root-owned and the broker could not write its log.
        #expect(logDirs == "/var/lib/kafka/data")
        #expect(kafka["image"].string?.hasPrefix("apache/kafka:") == true, "the data directory above is apache/kafka's")
    }

    /// An image build resolves the same dependency versions every time: every requirement in
    /// Package.swift is exact, and no Package.resolved from the machine that builds reaches it.
    @Test func imageBuildsResolveExactDependencyVersions() throws {
        let manifest = try String(contentsOf: DeployFiles.root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let requirements = manifest.split(separator: "\n").filter { $0.contains(".package(url:") }
        #expect(requirements.count >= 6, "the direct dependencies and swift-prometheus's own")
        for requirement in requirements {
            #expect(requirement.contains("exact: \""), "not an exact version: \(requirement)")
        }
        let ignored = try String(contentsOf: DeployFiles.root.appendingPathComponent(".dockerignore"), encoding: .utf8)
            .split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(ignored.contains("Package.resolved"), "a local Package.resolved would reach the image build")
        #expect(try Dockerfile.load().stages.first?.instructions.contains { $0.keyword == .copy && $0.arguments.hasPrefix("Package.swift ") } == true)
    }

    @Test func kubernetesNotesCreateTheTopicsAndGrantWhatTheReplicasNeed() throws {
        // The notes users follow before the first start, held to the manifests: what the pods
        // resolve from the ConfigMap is what the commands create and grant.
        let config = try RunCommand.parse([]).resolve(
            Environment(Dockerfile.load().runtimeEnvironment.merging(DeployFiles.kubernetesEnvironment()) { $1 })
        ).config
        let notes = try DeployFiles.text("deploy/k8s/README.md")
        let created = try DeployFiles.createdTopics(script: notes)
        let repartition = config.effectiveRepartitionTopic
        #expect(Set(created.keys).isSuperset(of: [config.inputTopic, config.outputTopics[0], config.deadLetterTopic, repartition]))
        let inputPartitions = try #require(created[config.inputTopic]?.partitions, "the notes create \(config.inputTopic) with --partitions")
        #expect(created[repartition]?.partitions == inputPartitions, "\(repartition): as many partitions as \(config.inputTopic)")
        #expect(created[repartition]?.configs.contains("cleanup.policy=delete") == true, "\(repartition): cleanup.policy=delete")
        let asWorker = Set(Pipeline.repartitionTopicConfig.map { "\($0.key)=\($0.value)" })
        #expect(Set(created[repartition]?.configs ?? []) == asWorker, "\(repartition): created as the worker creates it, \(asWorker.sorted())")
        #expect(created[config.outputTopics[0]]?.configs.contains("cleanup.policy=compact") == true)

        // Each stage's shards is bounded by its topic's partitions: more pods would idle.
        let replicas = try #require(DeployFiles.manifest(kind: "Deployment")["spec"]["replicas"].int)
        #expect(replicas <= min(inputPartitions, created[repartition]?.partitions ?? 0), "replicas beyond the partitions idle")

        // ACLs: both stages consume and produce, and commit in their own groups.
        let grants = DeployFiles.aclGrants(notes)
        let needed = [
            "read topic:\(config.inputTopic)", "read topic:\(repartition)", "write topic:\(repartition)",
            // The aggregate stage purges what its group committed.
            "delete topic:\(repartition)",
            "write topic:\(config.outputTopics[0])", "write topic:\(config.deadLetterTopic)", "read group:\(config.group)",
            "read group:\(config.aggregateGroup)",
        ]
        for grant in needed {
            #expect(grants.contains(grant), "deploy/k8s/README.md grants no \(grant)")
        }
        // The topic is created above; a worker left to create it itself needs Create on it.
        #expect(grants.contains("create topic:\(repartition)"), "the notes show the Create grant for a worker that creates the topic itself")
    }

    @Test func deployDocsWatchBothConsumerGroupsAndNameRealServices() throws {
        // Lag must be looked at for both stages' groups; the names come from what the
        // worker resolves, so a renamed group or a changed suffix fails here.
        let composeConfig = try RunCommand.parse([]).resolve(
            Environment(DeployFiles.workerEnvironment(try #require(DeployFiles.workerServices().first).name))).config
        let kubernetesConfig = try RunCommand.parse([]).resolve(
            Environment(Dockerfile.load().runtimeEnvironment.merging(DeployFiles.kubernetesEnvironment()) { $1 })).config
        for (file, config) in [("docs/deploy.md", composeConfig), ("deploy/k8s/README.md", kubernetesConfig)] {
            let text = try DeployFiles.text(file)
            for group in [config.group, config.aggregateGroup] {
                let pattern = try NSRegularExpression(pattern: "--group " + NSRegularExpression.escapedPattern(for: group) + "(?![A-Za-z0-9._-])")
                #expect(pattern.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil, "\(file): no --describe --group \(group)")
            }
            #expect(text.contains(config.effectiveRepartitionTopic), "\(file) names the repartition topic")
        }

        // Every compose service the walkthrough tells users to act on exists.
        let services = Set(try DeployFiles.compose()["services"].mapping?.keys.map { $0 } ?? [])
        let text = try DeployFiles.text("docs/deploy.md")
        let command = try NSRegularExpression(
            pattern: "docker compose -f deploy/docker-compose.yml (?:stop|start|restart|logs|exec|kill|rm|up -d|pause|unpause)((?: [a-z0-9][a-z0-9_-]*)+)")
        var named = 0
        for match in command.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
            let names = text[Range(match.range(at: 1), in: text)!].split(separator: " ").map(String.init)
            // `exec kafka /opt/...`: only the first word is a service there.
            for name in text[Range(match.range, in: text)!].contains(" exec ") ? Array(names.prefix(1)) : names {
                named += 1
                #expect(services.contains(name), "docs/deploy.md acts on the compose service \(name), which does not exist")
            }
        }
        #expect(named >= 3, "docs/deploy.md shows how to stop, restart and inspect the stack's services")
    }

    private static func exitStatus(_ command: [String], port: Int) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = command
        process.environment = ["PATH": "/usr/bin:/bin", "TRACKPIPE_METRICS_PORT": "\(port)"]
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }
}

/// Paths and parsed forms of the files under deploy/.
enum DeployFiles {
    /// The repository root, from this file's place in Tests/TrackpipeCLITests/.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let deploy = root.appendingPathComponent("deploy")

    static func relative(_ url: URL) -> String {
        String(url.standardizedFileURL.path.dropFirst(root.standardizedFileURL.path.count + 1))
    }

    static func allFiles() throws -> [URL] {
        guard let walker = FileManager.default.enumerator(at: deploy, includingPropertiesForKeys: [.isRegularFileKey]) else {
            throw DeployFileError("no deploy/ folder at \(deploy.path)")
        }
        return walker.compactMap { $0 as? URL }
            .filter { (try? $0.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true }
            .sorted { $0.path < $1.path }
    }

    static func yamlFiles() throws -> [URL] {
        try allFiles().filter { ["yml", "yaml"].contains($0.pathExtension) }
    }

    static func documents(_ url: URL) throws -> [YAMLNode] {
        try Yams.load_all(yaml: String(contentsOf: url, encoding: .utf8)).map(YAMLNode.init)
    }

    static func yaml(_ relativePath: String) throws -> YAMLNode {
        let documents = try documents(root.appendingPathComponent(relativePath))
        guard documents.count == 1 else { throw DeployFileError("\(relativePath): expected one YAML document") }
        return documents[0]
    }

    static func compose() throws -> YAMLNode { try yaml("deploy/docker-compose.yml") }

    static func text(_ relativePath: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(relativePath), encoding: .utf8)
    }

    /// The one manifest of that kind under deploy/k8s/.
    static func manifest(kind: String) throws -> YAMLNode {
        var found: [YAMLNode] = []
        for file in try yamlFiles() where relative(file).hasPrefix("deploy/k8s/") {
            found += try documents(file).filter { $0["kind"].string == kind }
        }
        guard found.count == 1 else { throw DeployFileError("expected one \(kind) under deploy/k8s, found \(found.count)") }
        return found[0]
    }

    /// A compose service's `environment`, as a mapping or as a list of NAME=value.
    static func environment(of service: YAMLNode) -> [String: String] {
        if let mapping = service["environment"].mapping {
            return mapping.mapValues { YAMLNode($0).scalarText ?? "" }
        }
        var result: [String: String] = [:]
        for entry in service["environment"].sequence ?? [] {
            let parts = "\(entry)".split(separator: "=", maxSplits: 1)
            result[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
        }
        return result
    }

    /// The compose services that run the worker: built from deploy/Dockerfile, with the image's
    /// command (`run`) or an explicit `run`. Sorted by name.
    static func workerServices() throws -> [(name: String, definition: YAMLNode)] {
        let services = try compose()["services"].mapping ?? [:]
        return services.keys.sorted().compactMap { name in
            let service = YAMLNode(services[name])
            guard service["build"]["dockerfile"].string == "deploy/Dockerfile" || service["image"].string == "trackpipe:local" else {
                return nil
            }
            let command = service["command"].sequence.map { $0.map { "\($0)" } } ?? service["command"].string.map { $0.split(separator: " ").map(String.init) }
            guard command == nil || command?.first == "run" else { return nil }
            return (name, service)
        }
    }

    /// What a compose worker's process sees: the image's ENV, then the service's environment.
    static func workerEnvironment(_ service: String) throws -> [String: String] {
        let definition = try compose()["services"][service]
        return try Dockerfile.load().runtimeEnvironment.merging(environment(of: definition)) { $1 }
    }

    /// A compose service's published ports, short ("[ip:]host:container[/proto]") or long syntax;
    /// `host` is empty when Docker picks one.
    static func publishedPorts(_ service: YAMLNode) -> [(host: String, container: String)] {
        (service["ports"].sequence ?? []).compactMap { entry in
            let long = YAMLNode(entry)
            if long.mapping != nil {
                guard let target = long["target"].scalarText else { return nil }
                return (long["published"].scalarText ?? "", target)
            }
            guard let text = YAMLNode(entry).scalarText else { return nil }
            let parts = text.split(separator: "/").first.map { $0.split(separator: ":", omittingEmptySubsequences: false).map(String.init) } ?? []
            guard let container = parts.last else { return nil }
            return (parts.count >= 2 ? parts[parts.count - 2] : "", container)
        }
    }

    /// A Deployment's or PDB's pod count: a number, or a percentage of `replicas` (maxSurge
    /// rounds up, maxUnavailable down, as Kubernetes does).
    static func podCount(_ node: YAMLNode, of replicas: Int, roundingUp: Bool) -> Int? {
        if let count = node.int { return count }
        guard let text = node.string, text.hasSuffix("%"), let percent = Int(text.dropLast()) else { return nil }
        let exact = Double(replicas * percent) / 100
        return Int(roundingUp ? exact.rounded(.up) : exact.rounded(.down))
    }

    static func workerContainer(_ deployment: YAMLNode) throws -> YAMLNode {
        let containers = (deployment["spec"]["template"]["spec"]["containers"].sequence ?? []).map(YAMLNode.init)
        guard let worker = containers.first(where: { $0["name"].string == "trackpipe" }) else {
            throw DeployFileError("the Deployment has no container named trackpipe")
        }
        return worker
    }

    /// The Deployment container's literal `env` entries.
    static func deploymentEnvironment() throws -> [String: String] {
        try literalEnvironment(workerContainer(manifest(kind: "Deployment")))
    }

    /// A container's literal `env` entries.
    static func literalEnvironment(_ container: YAMLNode) -> [String: String] {
        var result: [String: String] = [:]
        for entry in (container["env"].sequence ?? []).map(YAMLNode.init) {
            if let name = entry["name"].string { result[name] = entry["value"].scalarText ?? "" }
        }
        return result
    }

    /// The `TRACKPIPE_X` line the ConfigMap shows, commented out, for SASL_SSL.
    static func commentedSASLExample() throws -> String {
        let text = try self.text("deploy/k8s/configmap.yaml")
        let line = try #require(
            text.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("# TRACKPIPE_X: ") && $0.contains("SASL") },
            "configmap.yaml shows a commented SASL TRACKPIPE_X")
        let value = line.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: .whitespaces)
        return value.trimmingCharacters(in: CharacterSet(charactersIn: "\""))
    }

    /// What the worker's pod sees: ConfigMap, then Secret (envFrom, in that order), then `env`.
    /// The `envFrom` references must name the ConfigMap and the Secret in deploy/k8s.
    static func kubernetesEnvironment(secret withSecret: Bool = true) throws -> [String: String] {
        let configMap = try manifest(kind: "ConfigMap")
        let secret = try manifest(kind: "Secret")
        let container = try workerContainer(manifest(kind: "Deployment"))
        let sources = (container["envFrom"].sequence ?? []).map(YAMLNode.init)
        guard sources.contains(where: { $0["configMapRef"]["name"].string == configMap["metadata"]["name"].string }),
            sources.contains(where: { $0["secretRef"]["name"].string == secret["metadata"]["name"].string })
        else { throw DeployFileError("the Deployment's envFrom must name the ConfigMap and the Secret of deploy/k8s") }
        var result: [String: String] = [:]
        for (name, value) in configMap["data"].mapping ?? [:] { result[name] = YAMLNode(value).scalarText }
        if withSecret { for (name, value) in secret["stringData"].mapping ?? [:] { result[name] = YAMLNode(value).scalarText } }
        return result.merging(try deploymentEnvironment()) { $1 }
    }

    struct TopicSettings {
        var partitions: Int?
        var configs: [String] = []
    }

    /// The topics the compose `topics` job creates, from its kafka-topics.sh --create lines.
    static func createdTopics(_ compose: YAMLNode) throws -> [String: TopicSettings] {
        try createdTopics(script: (compose["services"]["topics"]["command"].sequence ?? []).map { "\($0)" }.joined(separator: "\n"))
    }

    /// The topics the `kafka-topics.sh ... --create` commands of a script or document create
    /// (any line with `--create`: the compose script calls kafka-topics.sh through a variable).
    static func createdTopics(script: String) throws -> [String: TopicSettings] {
        var topics: [String: TopicSettings] = [:]
        for line in commandLines(script) where line.contains("--create") {
            let words = Self.words(line)
            func values(_ flag: String) -> [String] {
                words.indices.filter { words[$0] == flag && $0 + 1 < words.count }.map { words[$0 + 1] }
            }
            guard let topic = values("--topic").first else { throw DeployFileError("a --create line without --topic: \(line)") }
            topics[topic] = TopicSettings(partitions: values("--partitions").first.flatMap { Int($0) }, configs: values("--config"))
        }
        return topics
    }

    /// What the `kafka-acls.sh --add` commands of a document allow, as "operation topic:name" and
    /// "operation group:name" (operations lowercased).
    static func aclGrants(_ text: String) -> Set<String> {
        var grants: Set<String> = []
        for line in commandLines(text) where line.contains("kafka-acls") && line.contains("--add") {
            let words = Self.words(line)
            func values(_ flag: String) -> [String] {
                words.indices.filter { words[$0] == flag && $0 + 1 < words.count }.map { words[$0 + 1] }
            }
            let resources = values("--topic").map { "topic:\($0)" } + values("--group").map { "group:\($0)" }
            for operation in values("--operation") {
                for resource in resources { grants.insert("\(operation.lowercased()) \(resource)") }
            }
        }
        return grants
    }

    /// Lines with shell continuations (a trailing backslash) joined.
    static func commandLines(_ text: String) -> [String] {
        var lines: [String] = []
        var pending = ""
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasSuffix("\\") {
                pending += line.dropLast() + " "
            } else {
                lines.append(pending + line)
                pending = ""
            }
        }
        if !pending.isEmpty { lines.append(pending) }
        return lines
    }

    /// A command line's words, with simple quotes removed.
    static func words(_ line: String) -> [String] {
        line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "'\"")) }
    }

    /// The generator's `command`: the arguments of the image's `trackpipe` entrypoint.
    static func generatorArguments() throws -> [String] {
        let command = try compose()["services"]["generator"]["command"]
        if let sequence = command.sequence { return sequence.map { "\($0)" } }
        if let text = command.string { return text.split(separator: " ").map(String.init) }
        throw DeployFileError("the generator service has no command")
    }

    /// The generator's command, parsed by the real command parser and validated.
    static func generatorCommand() throws -> GenerateCommand {
        let arguments = try generatorArguments()
        let parsed = try Trackpipe.parseAsRoot(arguments)
        guard let generate = parsed as? GenerateCommand else {
            throw DeployFileError("the generator runs `trackpipe \(arguments.joined(separator: " "))`, not `trackpipe generate`")
        }
        try generate.validate()
        return generate
    }
}

/// Navigation over what Yams loads (`[AnyHashable: Any]`, `[Any]`, scalars); a missing key
/// gives an empty node instead of a crash, so a wrong file fails an expectation.
struct YAMLNode {
    var value: Any?
    init(_ value: Any?) { self.value = value }

    subscript(key: String) -> YAMLNode { YAMLNode(mapping?[key]) }

    var mapping: [String: Any]? {
        guard let raw = value as? [AnyHashable: Any] else { return nil }
        return Dictionary(uniqueKeysWithValues: raw.map { ("\($0.key)", $0.value) })
    }
    var sequence: [Any]? { value as? [Any] }
    /// The node as one text, mappings with their keys sorted: equal texts, equal YAML.
    var canonical: String {
        switch value {
        case let mapping as [AnyHashable: Any]:
            "{" + mapping.map { ("\($0.key)", YAMLNode($0.value).canonical) }.sorted { $0.0 < $1.0 }.map { "\($0.0): \($0.1)" }
                .joined(separator: ", ") + "}"
        case let sequence as [Any]: "[" + sequence.map { YAMLNode($0).canonical }.joined(separator: ", ") + "]"
        case nil: "null"
        case let scalar?: "\(type(of: scalar)) \(scalar)"
        }
    }
    var string: String? { value as? String }
    var int: Int? { value as? Int }
    /// A scalar as the text the program would receive in an environment variable.
    var scalarText: String? {
        switch value {
        case let text as String: text
        case let number as Int: String(number)
        case let flag as Bool: String(flag)
        case let number as Double: String(number)
        default: nil
        }
    }
}

/// Just enough of the Dockerfile grammar: instructions with line continuations, stages, ENV
/// and ARG values, and exec-form (JSON array) arguments.
struct Dockerfile {
    enum Keyword: String {
        case from = "FROM", arg = "ARG", run = "RUN", copy = "COPY", env = "ENV", expose = "EXPOSE", user = "USER"
        case healthcheck = "HEALTHCHECK", stopsignal = "STOPSIGNAL", entrypoint = "ENTRYPOINT", cmd = "CMD"
        case workdir = "WORKDIR", other
    }
    struct Instruction {
        var keyword: Keyword
        var arguments: String
    }
    struct Stage {
        var from: String
        var instructions: [Instruction]
    }

    var globalArguments: [String: String] = [:]
    var stages: [Stage] = []

    static func load() throws -> Dockerfile {
        try Dockerfile(String(contentsOf: DeployFiles.deploy.appendingPathComponent("Dockerfile"), encoding: .utf8))
    }

    init(_ text: String) {
        var logical: [String] = []
        var pending = ""
        for rawLine in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("#") { continue }
            if line.hasSuffix("\\") {
                pending += line.dropLast() + " "
            } else {
                pending += line
                if !pending.trimmingCharacters(in: .whitespaces).isEmpty { logical.append(pending) }
                pending = ""
            }
        }
        for line in logical {
            let head = line.prefix { !$0.isWhitespace }
            let keyword = Keyword(rawValue: head.uppercased()) ?? .other
            let arguments = line.dropFirst(head.count).trimmingCharacters(in: .whitespaces)
            if keyword == .from {
                let image = arguments.split(separator: " ").first.map(String.init) ?? ""
                stages.append(Stage(from: image, instructions: []))
            } else if stages.isEmpty {
                if keyword == .arg {
                    let parts = arguments.split(separator: "=", maxSplits: 1).map(String.init)
                    globalArguments[parts[0]] = parts.count > 1 ? parts[1] : ""
                }
            } else {
                stages[stages.count - 1].instructions.append(Instruction(keyword: keyword, arguments: arguments))
            }
        }
    }

    /// The arguments of every `keyword` instruction in the final (runtime) stage.
    func runtime(_ keyword: Keyword) -> [String] {
        stages.last?.instructions.filter { $0.keyword == keyword }.map(\.arguments) ?? []
    }

    /// `ENV NAME=value NAME2="value 2"` of the runtime stage.
    var runtimeEnvironment: [String: String] {
        var result: [String: String] = [:]
        for arguments in runtime(.env) {
            var words: [String] = []
            var word = ""
            var quoted = false
            for character in arguments {
                if character == "\"" {
                    quoted.toggle()
                } else if character.isWhitespace && !quoted {
                    if !word.isEmpty { words.append(word) }
                    word = ""
                } else {
                    word.append(character)
                }
            }
            if !word.isEmpty { words.append(word) }
            for assignment in words {
                let parts = assignment.split(separator: "=", maxSplits: 1).map(String.init)
                if parts.count == 2 { result[parts[0]] = parts[1] }
            }
        }
        return result
    }

    /// The JSON array of the last `keyword` instruction of the runtime stage.
    func execForm(_ keyword: Keyword) throws -> [String] {
        guard let arguments = runtime(keyword).last else { throw DeployFileError("no \(keyword.rawValue) in the runtime stage") }
        return try Self.jsonArray(arguments)
    }

    /// HEALTHCHECK [options] CMD ["executable", ...]: the command Docker runs.
    func healthcheckCommand() throws -> [String] {
        guard let arguments = runtime(.healthcheck).last, let range = arguments.range(of: "CMD ") else { return [] }
        return try Self.jsonArray(String(arguments[range.upperBound...]))
    }

    private static func jsonArray(_ text: String) throws -> [String] {
        guard let array = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String] else {
            throw DeployFileError("not an exec-form JSON array: \(text)")
        }
        return array
    }
}

/// One HTTP/1.0 GET over a real loopback socket, the way a kubelet probe or Prometheus asks.
enum HTTPGet {
    struct Response {
        var status: Int
        var body: String
    }

    static func fetch(port: Int, path: String) throws -> Response {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw DeployFileError("socket() failed") }
        defer { close(fd) }
        // Bounds a hang only (see SafetyDeadline): a loaded machine may take seconds to answer.
        var timeout = timeval(tv_sec: Int(SafetyDeadline.seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw DeployFileError("cannot connect to 127.0.0.1:\(port)") }
        let request = Array("GET \(path) HTTP/1.0\r\nHost: localhost\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, 0) }) == request.count else {
            throw DeployFileError("send failed")
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            received += buffer[0..<count]
        }
        let text = String(decoding: received, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { throw DeployFileError("no HTTP response: \(text)") }
        let statusLine = text[..<split.lowerBound].split(separator: "\r\n").first ?? ""
        let words = statusLine.split(separator: " ")
        guard words.count >= 2, let status = Int(words[1]) else { throw DeployFileError("bad status line: \(statusLine)") }
        return Response(status: status, body: String(text[split.upperBound...]))
    }
}

struct DeployFileError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
