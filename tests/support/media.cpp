#include "tests/support/media.h"
