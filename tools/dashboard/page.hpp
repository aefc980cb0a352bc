#pragma once

// The dashboard's page: static HTML whose script polls /api/cluster every
// 2 s and redraws the nodes, the jobs with their ranks, and the training
// runs with each numeric metric plotted (server-side SVG from /api/plot);
// the runs of one tune experiment together under a heading with their count.
// Every value goes into the page as text (textContent), never as markup.

namespace hvactor::dashboard {

inline constexpr const char* page_html = R"html(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>hvactor dashboard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;font-size:.9em}
th{background:#f3f3f3}.state-running,.state-succeeded,.state-alive{color:#1a7f37}.state-failed,.state-lost{color:#c62828}
.job{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;margin:.8em 0}
pre{background:#f7f7f7;padding:.5em;max-height:14em;overflow:auto;font-size:.8em}
.experiment{border-left:3px solid #1f77b4;padding-left:.8em;margin:1em 0}.experiment-head{font-size:1em;margin:.3em 0}
.plots{display:flex;flex-wrap:wrap}.plots svg{margin:.3em .6em .3em 0;border:1px solid #eee}#status{color:#666;font-size:.85em}
</style></head><body>
<h1>hvactor cluster</h1><div id="status">loading…</div>
<h2>Nodes</h2><div id="totals"></div>
<table id="nodes"><thead><tr><th>node</th><th>address</th><th>state</th><th>CPU free</th><th>GPU free</th><th>version</th><th>uptime</th><th>jobs</th></tr></thead><tbody></tbody></table>
<h2>Jobs</h2><div id="jobs"></div>
<h2>Training runs</h2><div id="runs"></div>
<script>
"use strict";
function el(tag, text, cls){const e=document.createElement(tag);if(text!==undefined&&text!==null)e.textContent=String(text);if(cls)e.className=cls;return e;}
function row(cells, cls){const tr=el("tr",null,cls);for(const c of cells)tr.appendChild(c instanceof Node?c:el("td",c));return tr;}
function dur(ms){let s=Math.max(0,Math.round(ms/1000));const h=Math.floor(s/3600);s-=h*3600;const m=Math.floor(s/60);s-=m*60;return (h?h+"h ":"")+(h||m?m+"m ":"")+s+"s";}
function mib(b){return (b/1048576).toFixed(1);}
function table(headers, rows, cls){const t=el("table",null,cls);const hr=el("tr");for(const h of headers)hr.appendChild(el("th",h));const th=el("thead");th.appendChild(hr);t.appendChild(th);const tb=el("tbody");for(const r of rows)tb.appendChild(r);t.appendChild(tb);return t;}
function drawNodes(c){
  const tb=document.querySelector("#nodes tbody");tb.replaceChildren();
  for(const n of c.nodes){const st=el("td",n.state,"state-"+n.state);
    const tr=row([n.node_id,n.address+":"+n.port,st,n.cpus.free+"/"+n.cpus.total,n.gpus.free+"/"+n.gpus.total,n.version,dur(c.head.now_ms-n.started_ms),n.jobs.join(", ")||"-"]);
    tr.dataset.node=n.node_id;tr.className="node";tb.appendChild(tr);}
  const t=c.totals;document.getElementById("totals").textContent=t.nodes+" nodes; CPU "+t.cpus_free+"/"+t.cpus+" free; GPU "+t.gpus_free+"/"+t.gpus+" free";
}
function drawJobs(c){
  const box=document.getElementById("jobs");box.replaceChildren();
  if(!c.jobs.length)box.appendChild(el("p","no jobs yet"));
  for(const j of c.jobs){const d=el("div",null,"job");d.dataset.job=j.job_id;
    const h=el("div");h.appendChild(el("b",j.job_id));h.appendChild(el("span"," "+j.kind+" · "));h.appendChild(el("span",j.state,"job-state state-"+j.state));
    h.appendChild(el("span"," · "+j.size+" ranks · driver "+j.driver+" · "+dur((j.ended_ms||c.head.now_ms)-j.started_ms)));
    if(j.generation>=0)h.appendChild(el("span"," · generation "+j.generation+", resets "+j.resets));d.appendChild(h);
    const rows=j.ranks.map(r=>{const tr=row([r.rank,r.id,r.node,r.pid||"-",el("td",r.state,"state-"+r.state),r.cpu_seconds.toFixed(1),mib(r.rss_bytes)],"rank");tr.dataset.rank=r.rank;tr.dataset.node=r.node;return tr;});
    d.appendChild(table(["rank","worker","node","pid","state","CPU s","RSS MiB"],rows,"ranks"));
    if(j.collectives.length){const ops=j.collectives.map(o=>row([o.op,o.path,o.count,(o.bytes/1048576).toFixed(1),o.seconds.toFixed(3)],"op"));
      d.appendChild(table(["collective","path","count","MiB","seconds"],ops,"collectives"));}
    if(j.stalls)d.appendChild(el("div","Stall warnings: "+j.stalls,"stalls"));
    if(j.failures.length){d.appendChild(el("div","Failures:"));const p=el("pre",j.failures.join("\n"),"failures");d.appendChild(p);}
    if(j.timeline)d.appendChild(el("div","Timeline: "+j.timeline,"timeline"));
    if(j.log_tail.length){d.appendChild(el("div","Log tail:"));d.appendChild(el("pre",j.log_tail.join("\n"),"log"));}
    box.appendChild(d);}
}
const plotCache={};
async function drawRuns(c){
  const box=document.getElementById("runs");
  if(!c.runs.length){box.replaceChildren(el("p","no training runs yet"));return;}
  const out=[],groups=new Map(),trials=new Map();
  for(const r of c.runs)if(r.experiment)trials.set(r.experiment,(trials.get(r.experiment)||0)+1);
  for(let i=0;i<c.runs.length;i++){const r=c.runs[i];const d=el("div",null,"job run");d.dataset.run=r.run;
    d.appendChild(el("b",r.run));d.appendChild(el("span"," · job "+r.job_id+" · "+r.reports+" reports · "+r.storage));
    const last=r.points.length?r.points[r.points.length-1].metrics:{};
    const rows=Object.keys(last).sort().map(k=>row([k,String(last[k])]));
    d.appendChild(table(["metric","latest"],rows,"latest"));
    if(r.checkpoints.length)d.appendChild(el("div","Checkpoints: "+r.checkpoints.slice(-3).join(", "),"checkpoints"));
    const plots=el("div",null,"plots");d.appendChild(plots);
    for(const m of r.metrics){if(["training_iteration","attempt","time_total_s"].includes(m))continue;
      const key=i+"/"+m+"/"+r.reports;let svg=plotCache[key];
      if(svg===undefined){const res=await fetch("/api/plot?run="+i+"&metric="+encodeURIComponent(m),{cache:"no-store"});svg=res.ok?await res.text():"";plotCache[key]=svg;}
      const holder=el("div",null,"plot-holder");holder.dataset.metric=m;holder.innerHTML=svg;plots.appendChild(holder);}
    const x=r.experiment;if(!x){out.push(d);continue;}
    let g=groups.get(x);
    if(!g){const n=trials.get(x);g=el("div",null,"experiment");g.dataset.experiment=x;const h=el("h3",null,"experiment-head");
      h.appendChild(el("span","experiment "));h.appendChild(el("b",x));h.appendChild(el("span"," · "+n+(n===1?" trial":" trials"),"trials"));
      g.appendChild(h);groups.set(x,g);out.push(g);}
    g.appendChild(d);}
  box.replaceChildren(...out);
}
async function refresh(){
  try{const res=await fetch("/api/cluster",{cache:"no-store"});if(!res.ok)throw new Error(res.status+" "+await res.text());
    const c=await res.json();drawNodes(c);drawJobs(c);await drawRuns(c);
    document.getElementById("status").textContent="head "+c.head.node_id+" · up "+dur(c.head.now_ms-c.head.started_ms)+" · updated "+new Date(c.head.now_ms).toLocaleTimeString();
    document.body.dataset.loaded="1";
  }catch(e){document.getElementById("status").textContent="cannot reach the head: "+e.message;}
}
refresh();setInterval(refresh,2000);
</script></body></html>
)html";

} // namespace hvactor::dashboard
