// Package policy is ratekey's policy model: the named limits a program
// enforces ([Policy]), their overrides for some tenants, plans or accounts
// ([Override]), the priorities of an adaptive cap ([Priority], [Class]),
// the fail modes ([OnMissing], [OnStoreError]), their validation against
// the program around them ([Validate], [Rules]) and what a reload changes
// ([Diff]).
//
// The model is data: it does not know which transport serves the
// requests, and imports neither net/http nor any authentication. The
// decision core (ratekey's internal engine, which middleware drives for
// HTTP, and grpclimit through it) runs validated policies; the strings of its enumerations (on_missing,
// on_store_error, class, the change kinds) are the demo's configuration
// values and a public contract.
package policy
