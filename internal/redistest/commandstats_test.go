package redistest

import "testing"

func TestScriptCalls(t *testing.T) {
	const info = "# Commandstats\r\n" +
		"cmdstat_get:calls=7,usec=3,usec_per_call=0.43,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=120,usec=700,usec_per_call=5.83,rejected_calls=0,failed_calls=4\r\n" +
		"cmdstat_eval:calls=4,usec=90,usec_per_call=22.50,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_evalsha_ro:calls=9,usec=1,usec_per_call=0.11,rejected_calls=0,failed_calls=0\r\n"
	for _, c := range []struct {
		info          string
		calls, failed int64
	}{
		{info, 124, 5},
		{"# Commandstats\r\ncmdstat_ping:calls=1,usec=1\r\n", 0, 0},
		{"", 0, 0},
	} {
		if calls, failed := ScriptCalls(c.info); calls != c.calls || failed != c.failed {
			t.Errorf("ScriptCalls(%q) = %d, %d; want %d, %d", c.info, calls, failed, c.calls, c.failed)
		}
	}
}
