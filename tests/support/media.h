// Test media: tiny clips generated with libav (pattern + tone), probing helpers, temp dirs.
#pragma once
