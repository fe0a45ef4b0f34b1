#!/usr/bin/env python3
"""tests/kernels/cuda/emu/rewrite.py: turn a kernels/cuda .cu file into C++
that kemu.h can run: `kernel<<<grid, block, smem, stream>>>(args)` becomes
`kemu_launch(kernel, grid, block, smem, stream, args)`, and
`extern __shared__ T name[];` becomes a pointer to the block's dynamic
shared memory. Usage: rewrite.py IN.cu OUT.cpp"""
import re
import sys

src = open(sys.argv[1]).read()
src = re.sub(r'extern __shared__ (\w+) (\w+)\[\];', r'\1 *\2 = (\1 *)kemu_dyn_smem;', src)
src = re.sub(r'(\w+(?:<[\w, ]+>)?)<<<(.*?)>>>\(', r'kemu_launch(\1, \2, ', src)
if '<<<' in src:
    sys.exit(f'{sys.argv[1]}: a launch the rewrite did not understand')
open(sys.argv[2], 'w').write(src)
