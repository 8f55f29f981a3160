// MathJax settings for the pages' math: pymdownx.arithmatex (generic mode) wraps $...$ as \(...\) and $$...$$ as
// \[...\] in elements of class "arithmatex"; only those are typeset. Material's instant navigation swaps pages
// without a reload, so each new page is typeset again.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};

document$.subscribe(() => {
  if (window.MathJax && MathJax.typesetPromise) {
    MathJax.startup.output.clearCache();
    MathJax.typesetClear();
    MathJax.texReset();
    MathJax.typesetPromise();
  }
});
