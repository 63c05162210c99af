module github.com/ratekey/ratekey

go 1.26.0

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/goccy/go-yaml v1.19.2
	github.com/golang-jwt/jwt/v5 v5.3.1
	go4.org/netipx v0.0.0-20260823151212-3075585bcbeb
	golang.org/x/net v0.62.0
)

require golang.org/x/text v0.43.0 // indirect
