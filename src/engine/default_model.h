// The embedded default model's entry points are public API (dsv4/default_model.h): the CLI uses them. This header
// keeps the engine-internal include path working.
#pragma once

#include "dsv4/default_model.h"
