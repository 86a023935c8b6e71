// The librdkafka headers Swift sees: the client API and the mock cluster used as the embedded broker.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
