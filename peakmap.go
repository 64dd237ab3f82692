package ferry

import (
	"iter"
	"maps"
)

// peakMap is a map that rebuilds itself once it holds a quarter of its peak
// or less, a peak past shrinkLanes. Its zero value is empty. Its methods run
// on the goroutine that owns it: a loop, for the core's lanes and the loop's.
// Readers may index m directly (the core does, on its hot path); only put
// and del change it.
type peakMap[K comparable, V any] struct {
	m    map[K]V
	peak int
}

// shrinkLanes is the peak past which a peakMap shrinks.
const shrinkLanes = 1024

// get returns k's value, or the zero value.
func (p *peakMap[K, V]) get(k K) V { return p.m[k] }

// lookup returns k's value and whether k is there.
func (p *peakMap[K, V]) lookup(k K) (V, bool) {
	v, ok := p.m[k]
	return v, ok
}

// put sets k's value.
func (p *peakMap[K, V]) put(k K, v V) {
	if p.m == nil {
		p.m = make(map[K]V)
	}
	p.m[k] = v
	p.peak = max(p.peak, len(p.m))
}

// del deletes k, if it is there, and shrinks the map as peakMap says.
func (p *peakMap[K, V]) del(k K) {
	delete(p.m, k)
	if p.peak > shrinkLanes && len(p.m) <= p.peak/4 {
		p.m = maps.Clone(p.m)
		p.peak = len(p.m)
	}
}

// len is the number of entries.
func (p *peakMap[K, V]) len() int { return len(p.m) }

// all is the entries, in no order; a loop over it may delete only its entry.
func (p *peakMap[K, V]) all() iter.Seq2[K, V] { return maps.All(p.m) }
