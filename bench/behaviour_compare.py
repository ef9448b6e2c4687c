#!/usr/bin/env python3
"""Compares two bench/behaviour.sh outputs: model.safetensors tensor by tensor, the texts byte
by byte (binary names and output folders aside). Prints one line per difference."""
import sys, os, json, struct, glob
a, b = sys.argv[1], sys.argv[2]
def tensors(p):
    d = open(p,'rb').read(); n = struct.unpack('<Q', d[:8])[0]; h = json.loads(d[8:8+n]); body = d[8+n:]
    return {k: body[v['data_offsets'][0]:v['data_offsets'][1]] for k, v in h.items() if k != '__metadata__'}
bad = 0
for run in sorted(os.listdir(f'{a}/runs')):
    pa = f'{a}/runs/{run}/model.safetensors'
    if not os.path.exists(pa): continue
    pb = f'{b}/runs/{run}/model.safetensors'
    if not os.path.exists(pb): print('MISSING', run); bad += 1; continue
    ta, tb = tensors(pa), tensors(pb)
    same = ta == tb
    print(('same ' if same else 'DIFF ') + run); bad += not same
for f in sorted(glob.glob(f'{a}/*.txt') + glob.glob(f'{a}/*.json') + glob.glob(f'{a}/help/*')):
    g = f.replace(a, b, 1)
    x = open(f).read().replace('rdml-base', 'rdml').replace(a, 'X'); y = open(g).read().replace('rdml-new', 'rdml').replace(b, 'X')
    if x != y: print('DIFF', f); bad += 1
print('bad', bad)
