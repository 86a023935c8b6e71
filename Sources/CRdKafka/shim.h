// The librdkafka headers Swift sees: the client API and the mock cluster used as the embedded broker.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

// Swift cannot call C variadic functions: one (error, round-trip time) entry per call of the
// mock broker's per-broker error stack.
static inline rd_kafka_resp_err_t trackpipe_mock_broker_push_error(
    rd_kafka_mock_cluster_t *mcluster, int32_t broker_id, int16_t api_key, rd_kafka_resp_err_t err, int rtt_ms) {
    return rd_kafka_mock_broker_push_request_error_rtts(mcluster, broker_id, api_key, 1, err, rtt_ms);
}
