package grpclimit

// Refusal and Header expose refusal and header to the external tests.
var (
	Refusal = refusal
	Header  = header
)
