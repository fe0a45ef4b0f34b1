/* Stand-in for the CUDA header of this name: see ../kemu.h. */
#include "../kemu.h"
