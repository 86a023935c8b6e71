// The one call of librdkafka's mock cluster the tests need that Swift cannot make itself: the
// per-broker error stack is filled through a C variadic function. Its signature has plain C
// types only, so that Swift code using it needs no librdkafka type from this module.
#include <stdint.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

// One (error, round-trip time) entry per call.
static inline int trackpipe_mock_broker_push_error(void *mcluster, int32_t broker_id, int16_t api_key, int err, int rtt_ms) {
    return (int)rd_kafka_mock_broker_push_request_error_rtts(
        (rd_kafka_mock_cluster_t *)mcluster, broker_id, api_key, 1, (rd_kafka_resp_err_t)err, rtt_ms);
}
