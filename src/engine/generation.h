// The generation state machine is public API (dsv4/generation.h): the CLI and the server drive it. This header
// keeps the engine-internal include path working.
#pragma once

#include "dsv4/generation.h"
