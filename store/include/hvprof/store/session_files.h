// The files a session directory holds, removed as one: a session that starts again in its
// directory keeps none of the old one's (each file says which session it belongs to).
#pragma once

#include <string>

namespace hvprof::store {

// Removes session.json, samples.hvs, sched.hvs, aggregate.hva, context.hvc and jit/ from
// `directory`, whichever exist; anything else there stays.
void RemoveSessionFiles(const std::string& directory);

}  // namespace hvprof::store
