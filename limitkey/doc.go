// Package limitkey is the rate-limit key model: the typed, ordered tuple
// ([Key] of [Part] values, each a [Dimension] and a value) that names the bucket
// a request spends, with an encoding ([Key.String], [Key.AppendTo]) that is
// injective whatever bytes the values hold, printable ASCII (so a key can
// be logged and used as a Redis key verbatim), and parsed back by [Parse].
//
// The values come from verified sources only (a [Principal], which only
// package identity's authenticators produce: tenant, account, plan,
// credential id; the route template that serves the request; the client's
// network from package trustedproxy):
// this package checks the shape of a key, not where its values came from,
// and holds no secret. It imports neither net/http nor any other ratekey
// package; every function is safe for concurrent use.
package limitkey
