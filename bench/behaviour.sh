#!/bin/bash
# Behaviour fingerprints of a binary, for refactors that must change nothing (issue 27):
# every --help, every preset, short training runs of each defense and loss (weights),
# the rob28 table, an attack, eval --json and a few error messages.
# Usage: bash bench/behaviour.sh OLD_BINARY OUT_A; bash bench/behaviour.sh NEW_BINARY OUT_B;
#        python3 bench/behaviour_compare.py OUT_A OUT_B   (weights tensor by tensor, texts byte by byte)
B=$1; O=$2; rm -rf $O; mkdir -p $O/help $O/runs
for c in "" quickstart train compare eval attack robustness embed report presets devices bench-step; do
  $B $c --help > "$O/help/${c:-main}.txt" 2>&1
done
for p in $($B presets | awk '{print $1}'); do $B presets $p > $O/help/preset-$p.toml; done
budget='eps=0.3,step=0.03,steps=4'
declare -A D=(
 [none]=none
 [madry]="{kind=\"madry\",$budget}"
 [est]="{kind=\"est\",$budget}"
 [act]="{kind=\"act\",$budget}"
 [hm]="{kind=\"hm\",$budget,source=\"softhard\",destination=\"lga\",ics=0.5}"
 [hm-semihard]="{kind=\"hm\",$budget,source=\"random\",destination=\"semihard\",objective=\"kl\"}"
 [ca-tride]="{kind=\"ca-tride\",$budget,progressive=false}"
 [ca-tride-code]="{kind=\"ca-tride\",$budget,progressive=false,code_anp=true,code_weighting=true,mode=\"anp-only\"}"
 [pp]="{kind=\"positive-perturbation\",$budget,rate=0.7,target=\"anchor\",regularizer=0.5}"
 [f1]="{kind=\"formulation-1\",$budget}"
 [f2]="{kind=\"formulation-2\",$budget}"
 [f3]="{kind=\"formulation-3\",$budget,lambda=0.5}"
 [mdprop]="{kind=\"mdprop\",$budget,distributions=[{kind=\"stax\"},{kind=\"mtax\",targets=3}]}"
 [advprop]="{kind=\"advprop\",$budget}"
)
for k in "${!D[@]}"; do
  $B --quiet train --config quickstart --out $O/runs/$k --epochs 2 --max-batches 3 --set eval.nmi=false --defense "${D[$k]}" > $O/runs/$k.log 2>&1 || echo "FAIL $k" >> $O/fail
done
declare -A L=(
 [semihard]='loss.miner="semihard"'
 [contrastive]='loss={kind="contrastive",miner="distance"}'
 [margin]='loss={kind="margin"}'
 [ms]='loss={kind="multi-similarity"}'
 [lifted]='loss={kind="lifted"}'
 [npair]='loss={kind="npair"}'
 [dro]='loss={kind="dro",variant="kl",gamma=0.1}'
)
for k in "${!L[@]}"; do
  $B --quiet train --config quickstart --out $O/runs/loss-$k --epochs 1 --max-batches 3 --set eval.nmi=false --set "${L[$k]}" > $O/runs/loss-$k.log 2>&1 || echo "FAIL loss-$k" >> $O/fail
done
$B --quiet train --config quickstart --out $O/runs/q1 --epochs 1 --max-batches 20 > $O/runs/q1.log 2>&1
$B --quiet robustness --model $O/runs/q1 --profile rob28 --queries 64 > $O/rob28.txt 2>&1 || echo "FAIL rob" >> $O/fail
$B --quiet attack --model $O/runs/q1 --attack "CA+" --queries 32 > $O/attack-ca.txt 2>&1 || echo "FAIL attack" >> $O/fail
$B --quiet eval --model $O/runs/q1 --json > $O/eval.json 2>&1 || echo "FAIL eval" >> $O/fail
# error messages
$B train --config quickstart --out $O/e1 --defense '{kind="bogus"}' > $O/err-defense-kind.txt 2>&1
$B train --config quickstart --out $O/e2 --defense '{kind="hm",eps=0.3,step=0.1,steps=2}' > $O/err-hm-missing.txt 2>&1
$B train --config quickstart --out $O/e3 --defense '{kind="act",eps=0.3,step=0.1,steps=2}' --set 'loss={kind="npair"}' > $O/err-act-loss.txt 2>&1
$B train --config quickstart --out $O/e4 --set 'loss={kind="dro",variant="top-k"}' > $O/err-dro.txt 2>&1
$B train --config quickstart --out $O/e5 --set 'loss={kind="triplet",margn=1}' > $O/err-loss-field.txt 2>&1
$B train --config quickstart --out $O/e6 --defense '{kind="madry",eps=0.3,step=0.1,steps=2,rate=1}' > $O/err-defense-field.txt 2>&1
$B train --config quickstart --out $O/e7 --defense '{kind="mdprop",eps=0.3,step=0.1,steps=2,distributions=[]}' > $O/err-mdprop.txt 2>&1
echo done > $O/done
