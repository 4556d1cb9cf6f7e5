package kdelay

// HostNetwork lets the tests start their Kafka container the way Run
// starts a relay with WithHostNetwork.
var HostNetwork = hostNetwork
