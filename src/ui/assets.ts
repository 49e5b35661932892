/**
 * The high-contrast theme for direct sunlight: pure black and white, thicker borders, no grey.
 * `scope` is what turns it on: the page's own switch (`html.sun`, a cookie) or the phone's
 * "increase contrast" setting (prefers-contrast: more).
 */
const sun = (scope: string): string =>
  [
    `${scope} body{font-weight:500}`,
    `${scope} .muted{color:#000}`,
    `${scope} button,${scope} .button{background:#000;color:#fff;border-width:4px}`,
    `${scope} button.secondary,${scope} .button.secondary,${scope} header button{background:#fff;color:#000}`,
    `${scope} .link,${scope} section.load,${scope} input,${scope} select,${scope} .flash,${scope} .error,${scope} .warn{border-width:4px}`,
    `${scope} .flash,${scope} .error,${scope} .warn,${scope} .link.online{background:#fff;color:#000}`,
    `${scope} ul.ms li{border-top-width:3px}`,
    `${scope} .state.delivered{background:#003d00}`,
    `${scope} .state.refused{background:#7a0016}`,
  ].join('\n');

/**
 * The page's only assets, served by the agent itself (the cab may have no internet): a style
 * sheet with a high-contrast theme for direct sunlight, and one small script that follows
 * the Server-Sent Events stream. Kept as strings so the bundle carries them (no files to
 * find beside dist/ at run time). The page works without the script: it then shows the
 * state as of its last load.
 */

export const CSS = `*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;font:18px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:#fff;color:#000}
header{display:flex;align-items:center;justify-content:space-between;gap:8px;padding:8px 12px;background:#000;color:#fff}
header h1{font-size:20px;margin:0}
main{padding:8px 12px;max-width:960px;margin:0 auto}
@media (min-width:700px){main.loads{display:grid;grid-template-columns:repeat(auto-fit,minmax(340px,1fr));gap:12px}}
.link{font-weight:700;padding:8px 12px;border:3px solid #000;margin:8px 0}
.link.offline{background:#ffd400;color:#000}
.link.online{background:#fff}
.flash{border:3px solid #006100;background:#e6ffe6;padding:8px 12px;margin:8px 0;font-weight:700}
.error{border:3px solid #b00020;background:#ffe8ea;padding:8px 12px;margin:8px 0;font-weight:700}
.warn{border:3px solid #000;border-left-width:12px;background:#ffd400;color:#000;padding:8px 12px;margin:8px 0;font-weight:700}
section.load{border:3px solid #000;padding:8px 12px;margin:8px 0}
h2{font-size:22px;margin:4px 0}
h3{font-size:18px;margin:10px 0 4px}
p{margin:4px 0}
.muted{color:#333}
.actions{display:grid;grid-template-columns:1fr 1fr;gap:8px;margin:8px 0}
button,.button{display:flex;flex-direction:column;justify-content:center;align-items:center;min-height:56px;min-width:44px;padding:6px 10px;font-family:inherit;font-weight:700;font-size:18px;line-height:1.2;color:#fff;background:#0033a0;border:3px solid #000;border-radius:6px;text-decoration:none;text-align:center;cursor:pointer}
button small{font-weight:400;font-size:13px}
button.secondary,.button.secondary{background:#fff;color:#000}
header button{min-height:44px;background:#fff;color:#000;font-size:16px}
button:focus-visible,.button:focus-visible,input:focus-visible,select:focus-visible{outline:4px solid #ffd400;outline-offset:2px}
label{display:block;font-weight:700;margin:12px 0 4px}
input,select{width:100%;min-height:48px;font:inherit;padding:6px 8px;border:3px solid #000;border-radius:6px;background:#fff;color:#000}
form.confirm .row{display:grid;grid-template-columns:1fr 1fr;gap:8px;margin-top:16px}
ul.ms{list-style:none;padding:0;margin:0}
ul.ms li{display:flex;justify-content:space-between;gap:8px;padding:6px 0;border-top:1px solid #000}
.state{align-self:flex-start;font-weight:700;white-space:nowrap;padding:0 6px;border:2px solid #000}
.state.delivered{background:#006100;color:#fff}
.state.waiting{background:#ffd400;color:#000}
.state.refused{background:#b00020;color:#fff;white-space:normal}
footer{padding:8px 12px 16px;max-width:960px;margin:0 auto}
${sun('html.sun')}
@media (prefers-contrast:more){
${sun('html')}
}
`;

export const JS = `'use strict';
(function () {
  if (!window.EventSource) return;
  var es = new EventSource('/events');
  es.onmessage = function (e) {
    var d = JSON.parse(e.data);
    // The session is gone (an agent restart, Log out): the login page, not a frozen link line.
    if (d.reload) { es.close(); location.reload(); return; }
    var link = document.getElementById('link');
    if (link) {
      link.textContent = d.link;
      link.className = 'link ' + (d.online ? 'online' : 'offline');
    }
    for (var i = 0; i < d.milestones.length; i++) {
      var m = d.milestones[i];
      var li = document.querySelector('[data-m="' + m.id + '"]');
      // One the page does not show yet (the detector's, the CLI's): the page shows it after a reload.
      if (!li) { es.close(); location.reload(); return; }
      var s = li.querySelector('.state');
      s.textContent = m.text;
      s.className = 'state ' + m.state;
    }
  };
})();
`;
