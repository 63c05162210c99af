package limitkey_test

import (
	"fmt"

	"github.com/ratekey/ratekey/limitkey"
)

func ExampleKey_String() {
	k := limitkey.Key{
		Policy: "per-account",
		Parts: []limitkey.Part{
			{Dimension: limitkey.DimTenant, Value: "acme"},
			{Dimension: limitkey.DimAccount, Value: "alice"},
			{Dimension: limitkey.DimOperation, Value: "GET /v1/reports/{id}"},
		},
	}
	fmt.Println(k)

	// Separators and non-printable bytes inside values are escaped, so
	// ("a|b", "c") and ("a", "b|c") never share an encoding.
	x := limitkey.Key{Policy: "p", Parts: []limitkey.Part{
		{Dimension: limitkey.DimTenant, Value: "a|b"}, {Dimension: limitkey.DimAccount, Value: "c"}}}
	y := limitkey.Key{Policy: "p", Parts: []limitkey.Part{
		{Dimension: limitkey.DimTenant, Value: "a"}, {Dimension: limitkey.DimAccount, Value: "b|c"}}}
	fmt.Println(x)
	fmt.Println(y)
	fmt.Println(limitkey.Key{Policy: "p", Parts: []limitkey.Part{{Dimension: limitkey.DimAccount, Value: "José\n"}}})

	back, err := limitkey.Parse(k.String())
	fmt.Println(err, back.Parts[2].Value)
	// Output:
	// per-account|tenant=acme|account=alice|operation=GET /v1/reports/{id}
	// p|tenant=a%7Cb|account=c
	// p|tenant=a|account=b%7Cc
	// p|account=Jos%C3%A9%0A
	// <nil> GET /v1/reports/{id}
}
