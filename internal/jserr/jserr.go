// Package jserr tells apart JetStream's refusals of a message: for want of
// room in the stores (an outage of a kind, which the bodies wait out) or
// for what the message is.
package jserr

// StoreFull reports whether a JetStream refusal's err_code says there is
// no room for the message: the account's limits exceeded (10002, a 400),
// insufficient resources (10023, a 503), the server's storage or memory
// spent (10047, 10028, 500s).
func StoreFull(errCode int) bool {
	switch errCode {
	case 10002, 10023, 10028, 10047:
		return true
	}
	return false
}
