package trustedproxy_test

import (
	"fmt"
	"net/http"

	"github.com/ratekey/ratekey/trustedproxy"
)

// A client that reaches the service directly cannot choose its address by
// forging X-Forwarded-For: the header is read only from trusted proxies, and
// then walked from the right.
func ExampleResolver_Resolve() {
	r, err := trustedproxy.New(trustedproxy.Config{
		Trusted: []string{"10.0.0.0/8"}, // the load balancers
		Header:  "X-Forwarded-For",
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("X-Forwarded-For", "1.2.3.4, 10.0.0.1") // forged by the client

	// Direct connection from 203.0.113.9: the forged header is ignored.
	res, _ := r.Resolve("203.0.113.9:41000", h)
	fmt.Println(res.Client, res.Network, res.Derivation.Reason)

	// The same forged value behind a trusted load balancer, which appended
	// the address it saw: the walk stops at the first untrusted hop.
	h.Set("X-Forwarded-For", "1.2.3.4, 10.0.0.1, 203.0.113.9")
	res, _ = r.Resolve("10.0.0.2:55000", h)
	fmt.Println(res.Client, res.Network, res.Derivation.Reason)
	for _, hop := range res.Derivation.Hops {
		fmt.Println(hop.Position, hop.Value, hop.Verdict)
	}
	// Output:
	// 203.0.113.9 203.0.113.9/32 peer_untrusted
	// 203.0.113.9 203.0.113.9/32 first_untrusted_hop
	// 2 203.0.113.9 client
}
