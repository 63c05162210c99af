package memory

// table is an open-addressing hash table from a bucket's 64-bit hash to its
// TAT: linear probing over 16-byte slots, backward-shift deletion (no
// tombstones), grown by half when more than 4/5 full. Its load therefore
// stays between about 0.53 and 0.8, so a tracked bucket costs 20 to 30 bytes
// (nginx documents 128 bytes per limit_req state; a Go map[uint64]int64
// costs about 38). The slot is chosen from the hash's high 32 bits (the low
// bits pick the shard) by multiply-shift, so the size need not be a power
// of two. Hashes are keyed and uniformly spread; 0 marks an empty slot, so
// a hash of 0 is stored as 1.
//
// A table is not safe for concurrent use: its shard's mutex guards it.
type table struct {
	slots []slot16
	n     int // occupied slots
}

// slot16 is one entry; h == 0 means empty.
type slot16 struct {
	h   uint64
	tat int64
}

// minTable is the smallest table, in slots.
const minTable = 16

// norm maps the reserved empty marker to a valid hash.
func norm(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// home returns the first slot probed for h.
func (t *table) home(h uint64) int {
	return int((h >> 32) * uint64(len(t.slots)) >> 32)
}

// get returns h's TAT and whether h is tracked.
func (t *table) get(h uint64) (int64, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	h = norm(h)
	for i := t.home(h); ; {
		s := &t.slots[i]
		switch s.h {
		case h:
			return s.tat, true
		case 0:
			return 0, false
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// put stores h's TAT and reports whether h is new.
func (t *table) put(h uint64, tat int64) bool {
	if (t.n+1)*5 > len(t.slots)*4 {
		t.grow()
	}
	h = norm(h)
	for i := t.home(h); ; {
		s := &t.slots[i]
		switch s.h {
		case h:
			s.tat = tat
			return false
		case 0:
			s.h, s.tat = h, tat
			t.n++
			return true
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// grow rehashes into a table half as large again (at least minTable).
func (t *table) grow() {
	old := t.slots
	size := max(minTable, len(old)+len(old)/2)
	t.slots = make([]slot16, size)
	t.n = 0
	for _, s := range old {
		if s.h != 0 {
			t.insertNew(s.h, s.tat)
		}
	}
}

// insertNew places an entry known to be absent, without growing.
func (t *table) insertNew(h uint64, tat int64) {
	for i := t.home(h); ; {
		if t.slots[i].h == 0 {
			t.slots[i] = slot16{h, tat}
			t.n++
			return
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// deleteAt empties slot i and shifts back the entries of its probe run that
// would no longer be reachable (Knuth's algorithm R), so no tombstone is
// left behind.
func (t *table) deleteAt(i int) {
	n := len(t.slots)
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		s := t.slots[j]
		if s.h == 0 {
			break
		}
		// Move s into the hole at i unless its home lies cyclically in (i, j].
		k := t.home(s.h)
		if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = slot16{}
	t.n--
}

// evict removes every entry whose TAT is at most now and returns how many
// it removed and the lowest TAT left (math.MaxInt64 when none).
func (t *table) evict(now int64) (removed int, low int64) {
	low = int64(^uint64(0) >> 1)
	for i := 0; i < len(t.slots); {
		s := t.slots[i]
		if s.h != 0 && s.tat <= now {
			// Deleting may shift a later entry into slot i: look at it again.
			t.deleteAt(i)
			removed++
			continue
		}
		if s.h != 0 && s.tat < low {
			low = s.tat
		}
		i++
	}
	return removed, low
}
