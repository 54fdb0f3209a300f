// Package modelcache keeps the whole model decoded in the controller's
// memory, for the whole-model status (ctl status, ctl wait): built from
// the watch hub's changes, it answers without reading etcd, where a read
// of the model at 100,000 units is some 500,000 keys.
//
// A Cache follows the prefixes state.Model reads (state.ModelPrefixes),
// one polled stream of the hub each, charged to one budget of the hub:
// each starts with a listing, then brings its changes, which a
// state.ModelBuilder applies (what a key means is decoded in state alone).
// Streams list at revisions of their own and bring changes as the hub
// hands them out, so the cache advances by cuts: it reads the revision H
// the hub has handed out every change up to, takes what every stream
// holds, and applies the changes up to H, keeping those after for the
// next cut. Its model is then the model at H, exactly what state.Model
// reads at H. A caller waiting a while (20 ms) for a revision the hub
// has not handed out has the keeper ask etcd for the hub's watch's
// progress (Config.Progress): a write outside the model's namespace moves
// the revision without a change the hub would see. A stream that lists again (it fell behind) is applied as
// its listing once the cut reaches the listing's revision; a budget cut,
// a read error or an undecodable value ends the keeper, which lists
// everything again when next wanted.
//
// The keeper runs only while wanted: Model starts it (Run's goroutine
// does, which owns it), and it stops once no call asked for a while
// (Config.Idle), dropping the model, so that an idle controller holds
// nothing and reads nothing. Model waits, bounded (Config.Wait), for the
// cache to reach the revision asked for, and otherwise says why it cannot
// answer: the caller reads etcd instead. What a caller makes of the model
// (the controller's status) can be kept beside it (Keep, Kept) and is
// dropped when the model changes or the keeper stops. The cache writes
// nothing and knows nothing of what the status shows.
package modelcache
