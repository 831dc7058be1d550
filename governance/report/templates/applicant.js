/* The report's "Try an applicant" panel: one row in the original columns followed through
 * the surrogate (and the embedded ensemble) exactly as `govern explain-row` follows it.
 * Plain ES2017, no library, no network: the words come from the report's JSON block
 * (governance/report/applicant_model.py); this script routes and fills in numbers. */
"use strict";
var ApplicantPanel = (function () {
  var MISSING_WORDS = ["", "nan", "na", "n/a", "null", "none"];

  /* |x| rounded to `digits` significant digits from its exact decimal expansion, ties to
   * even (as Python formats): the digits and the exponent of the first one. */
  function roundDigits(x, digits) {
    var text = Math.abs(x).toExponential(99);
    var mark = text.indexOf("e");
    var all = text.slice(0, mark).replace(".", "");
    var exponent = parseInt(text.slice(mark + 1), 10);
    var kept = all.slice(0, digits).split("").map(Number);
    var rest = all.slice(digits);
    var odd = kept[kept.length - 1] % 2 === 1;
    if (rest[0] > "5" || (rest[0] === "5" && (/[1-9]/.test(rest.slice(1)) || odd))) {
      var i = kept.length - 1;
      while (i >= 0 && kept[i] === 9) {
        kept[i] = 0;
        i -= 1;
      }
      if (i < 0) {
        kept.unshift(1);
        kept.pop();
        exponent += 1;
      } else {
        kept[i] += 1;
      }
    }
    return { digits: kept.join(""), exponent: exponent };
  }

  function positional(r) {
    var point = r.exponent + 1;
    var digits = r.digits;
    if (point <= 0) return "0." + "0".repeat(-point) + digits;
    if (point >= digits.length) return digits + "0".repeat(point - digits.length);
    return digits.slice(0, point) + "." + digits.slice(point);
  }

  function strip(text) {
    return text.indexOf(".") < 0 ? text : text.replace(/0+$/, "").replace(/\.$/, "");
  }

  /* governance.miret.tree.conditions.format_number: Python's f"{x:.0f}" between
   * 10**digits and a million, else f"{x:.{digits}g}". */
  function formatNumber(x, significant) {
    var digits = significant || 4;
    if (x === 0) return "0";
    var sign = x < 0 ? "-" : "";
    if (Math.pow(10, digits) <= Math.abs(x) && Math.abs(x) < 1e6) {
      var whole = parseInt(Math.abs(x).toExponential(99).split("e")[1], 10) + 1;
      return sign + positional(roundDigits(x, whole));
    }
    var r = roundDigits(x, digits);
    if (r.exponent < -4 || r.exponent >= digits) {
      var mantissa = strip(r.digits[0] + "." + r.digits.slice(1));
      var e = Math.abs(r.exponent);
      return sign + mantissa + "e" + (r.exponent < 0 ? "-" : "+") + (e < 10 ? "0" : "") + e;
    }
    return sign + strip(positional(r));
  }

  /* numpy's pairwise summation of a contiguous row (np.add.reduce). */
  function pairwise(a, start, n) {
    var i, res;
    if (n < 8) {
      res = 0;
      for (i = 0; i < n; i++) res += a[start + i];
      return res;
    }
    if (n <= 128) {
      var r = a.slice(start, start + 8);
      for (i = 8; i < n - (n % 8); i += 8) {
        for (var j = 0; j < 8; j++) r[j] += a[start + i + j];
      }
      res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
      for (; i < n; i++) res += a[start + i];
      return res;
    }
    var half = Math.floor(n / 2);
    half -= half % 8;
    return pairwise(a, start, half) + pairwise(a, start + half, n - half);
  }

  function sum(a) {
    return pairwise(a, 0, a.length);
  }

  function missing(text) {
    return text === undefined || text === null || MISSING_WORDS.indexOf(String(text).trim().toLowerCase()) >= 0;
  }

  function number(column, text) {
    if (missing(text)) return NaN;
    var x = Number(String(text).trim());
    if (Number.isNaN(x)) throw new Error(column + " must be a number in raw units, not " + JSON.stringify(String(text)));
    if (!Number.isFinite(x)) throw new Error(column + " must be a finite number");
    return x;
  }

  function category(column, text) {
    if (missing(text)) {
      if (column.blank === "missing") return null;
      throw new Error(column.name + ": choose a category; this pipeline's encoder was not trained with missing categories");
    }
    var value = String(text).trim();
    if (column.categories.indexOf(value) < 0) {
      throw new Error(column.name + ": " + JSON.stringify(value) + " was not seen in training (seen: " + column.categories.join(", ") + ")");
    }
    return value;
  }

  /* The tree's features (explain-row's rows) from a row of original columns. */
  function parse(model, values) {
    var parsed = {};
    model.columns.forEach(function (column) {
      parsed[column.name] = column.kind === "number" ? number(column.name, values[column.name]) : category(column, values[column.name]);
    });
    return parsed;
  }

  function encode(model, parsed) {
    if (!model.encoded) return model.features.map(function (name) { return parsed[name]; });
    return model.encoded.map(function (f) {
      var value = parsed[f.column];
      if (f.kind === "numeric") return value * f.scale + f.min;
      if (f.kind === "one-hot") return value === f.categories[0] ? 1 : 0;
      return f.categories.indexOf(value);
    });
  }

  function scale(scaler, x) {
    if (!scaler) return x.slice();
    return x.map(function (v, j) {
      var s = v * scaler.scale[j] + scaler.min[j];
      return scaler.clip ? Math.min(Math.max(s, 0), 1) : s;
    });
  }

  function rawValues(model, x) {
    if (!model.encoded) return x;
    return x.map(function (v, j) { return (v - model.encoded[j].min) / model.encoded[j].scale; });
  }

  /* The row's category of a split on one encoded column of a categorical column, as
     explain-row shows it: its text, or null when the row has none (missing). */
  function splitCategory(model, parsed, rawTerms) {
    if (!model.encoded || rawTerms.length !== 1) return undefined;
    var feature = model.encoded[rawTerms[0][0]];
    if (feature.kind === "numeric") return undefined;
    return parsed[feature.column];
  }

  function surrogatePath(model, x, parsed) {
    var tree = scale(model.scaler, x);
    var filled = tree.map(function (v) { return Number.isNaN(v) ? 0 : v; });
    var raw = rawValues(model, x);
    var depth = Math.round(Math.log2(model.leaf_class.length));
    var steps = [];
    var node = 0;
    var right = false;
    for (var level = 0; level < depth; level++) {
      var split = model.nodes[node];
      var products = filled.map(function () { return 0; });
      var undefinedValue = false;
      split.terms.forEach(function (term) {
        products[term[0]] = filled[term[0]] * term[1];
        if (Number.isNaN(tree[term[0]])) undefinedValue = true;
      });
      right = sum(products) + split.intercept > 0;
      if (undefinedValue) right = !split.missing_left;
      if (split.condition !== null) {
        var value;
        if (split.raw_terms.length === 1) value = raw[split.raw_terms[0][0]];
        else value = split.raw_terms.reduce(function (s, t) { return s + t[1] * raw[t[0]]; }, 0);
        if (undefinedValue) value = NaN;
        var cat = splitCategory(model, parsed, split.raw_terms);
        if (cat === null) value = NaN;
        var answer = (right ? "right" : "left") === split.yes ? "yes" : "no";
        var holds = answer === "yes" ? split.condition : split.negation;
        var shown = typeof cat === "string" ? cat : Number.isNaN(value) ? "missing, by the rule for missing values" : formatNumber(value);
        steps.push({
          node: node,
          condition: split.condition,
          answer: answer,
          holds: holds,
          value: Number.isNaN(value) ? null : value,
          text: holds + " (row: " + shown + ")",
          line: "node " + node + ": " + split.condition + "? " + answer + " (row: " + shown + ")"
        });
      }
      if (level < depth - 1) node = 2 * node + 1 + (right ? 1 : 0);
    }
    var leaf = 2 * node + 1 + (right ? 1 : 0);
    var cls = model.leaf_class[leaf - (model.leaf_class.length - 1)];
    return { steps: steps, leaf: leaf, surrogate: model.class_names[cls] };
  }

  function softmax(margin) {
    var top = Math.max.apply(null, margin);
    var e = margin.map(function (m) { return Math.exp(m - top); });
    var total = sum(e);
    return e.map(function (v) { return v / total; });
  }

  function leafOf(tree, x, leftIfLess) {
    var node = 0;
    while (tree.feature[node] >= 0) {
      var v = x[tree.feature[node]];
      var left = leftIfLess ? v < tree.threshold[node] : v <= tree.threshold[node];
      if (Number.isNaN(v)) left = tree.missing_left[node];
      var cat = tree.categorical[String(node)];
      if (cat) {
        var last = cat.answer.length - 1;
        var said = 2;
        if (!Number.isNaN(v)) {
          var code = Math.trunc(v);
          var negative = cat.truncates ? code < 0 : v < 0;
          said = cat.answer[negative || !(code < last) ? last : code];
        }
        left = said === 2 ? cat.missing_left : said === 1;
      }
      node = left ? tree.left[node] : tree.right[node];
    }
    return node;
  }

  function ensembleAnswer(model, x) {
    var e = model.ensemble;
    var input = model.encoded ? x.slice() : scale(e.input, x);
    if (e.float32) input = input.map(Math.fround);
    e.groups.forEach(function (group) {
      var code = NaN;
      for (var i = group[1] - 1; i >= 0; i--) if (input[group[0] + i] > 0.5) code = i;
      input[group[0]] = code;
    });
    var values = e.trees.map(function (tree) { return tree.value[leafOf(tree, input, e.left_if === "<")]; });
    var k = e.class_names.length;
    var proba;
    if (e.aggregation === "average" && k > 2) {
      var total = [];
      for (var c = 0; c < k; c++) total.push(0);
      values.forEach(function (v) { for (var c2 = 0; c2 < k; c2++) total[c2] += v[c2]; });
      proba = total.map(function (t) { return t / values.length; });
    } else if (k > 2) {
      proba = softmax(e.base_margin.map(function (base, c3) {
        return base + sum(values.filter(function (v, t) { return e.tree_class[t] === c3; }));
      }));
    } else {
      var positive = e.aggregation === "average" ? sum(values) / values.length : 1 / (1 + Math.exp(-(e.base_margin + sum(values))));
      proba = [1 - positive, positive];
    }
    var best = 0;
    proba.forEach(function (p, c4) { if (p > proba[best]) best = c4; });
    return { ensemble: e.class_names[best], proba: proba };
  }

  /* One row (column -> text as typed; blank = missing) through both models. */
  function follow(model, values) {
    var parsed = parse(model, values);
    var x = encode(model, parsed);
    var path = surrogatePath(model, x, parsed);
    if (model.ensemble) {
      var answer = ensembleAnswer(model, x);
      path.ensemble = answer.ensemble;
      path.proba = answer.proba;
      path.agrees = answer.ensemble === path.surrogate;
    } else {
      path.ensemble = null;
      path.proba = null;
      path.agrees = null;
    }
    return path;
  }

  function splitCsv(line) {
    var cells = [];
    var cell = "";
    var quoted = false;
    for (var i = 0; i < line.length; i++) {
      var ch = line[i];
      if (quoted && ch === '"' && line[i + 1] === '"') {
        cell += '"';
        i += 1;
      } else if (ch === '"') {
        quoted = !quoted;
      } else if (ch === "," && !quoted) {
        cells.push(cell);
        cell = "";
      } else {
        cell += ch;
      }
    }
    cells.push(cell);
    return cells;
  }

  /* A pasted row: a JSON object, or CSV with a header line and one data line. */
  function parseRow(text) {
    var trimmed = text.trim();
    if (trimmed[0] === "{") {
      var object = JSON.parse(trimmed);
      var out = {};
      Object.keys(object).forEach(function (key) { out[key] = object[key] === null ? "" : String(object[key]); });
      return out;
    }
    var lines = trimmed.split(/\r?\n/).filter(function (l) { return l.trim() !== ""; });
    if (lines.length !== 2) throw new Error("paste a JSON object, or CSV: a header line and one row");
    var header = splitCsv(lines[0]);
    var row = splitCsv(lines[1]);
    if (header.length !== row.length) throw new Error("the header has " + header.length + " columns, the row " + row.length);
    var values = {};
    header.forEach(function (name, i) { values[name.trim()] = row[i]; });
    return values;
  }

  function element(tag, attributes, text) {
    var node = document.createElement(tag);
    Object.keys(attributes || {}).forEach(function (key) { node.setAttribute(key, attributes[key]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function show(model, form, out) {
    var values = {};
    model.columns.forEach(function (column) { values[column.name] = form.elements[column.name].value; });
    out.textContent = "";
    try {
      var path = follow(model, values);
      var list = element("ol", { "class": "steps" });
      path.steps.forEach(function (step) { list.appendChild(element("li", {}, step.line)); });
      if (!path.steps.length) list.appendChild(element("li", {}, "no split: every row reaches the one leaf"));
      out.appendChild(list);
      out.appendChild(element("p", {}, "leaf " + path.leaf + ": surrogate " + path.surrogate));
      if (path.ensemble !== null) {
        var shares = path.proba.map(function (p, c) { return model.ensemble.class_names[c] + " " + formatNumber(p, 3); }).join(", ");
        var verdict = element("p", { "class": path.agrees ? "agree" : "differs" });
        verdict.textContent = "ensemble " + path.ensemble + " (probabilities: " + shares + "): " + (path.agrees ? "agree" : "DISAGREE");
        out.appendChild(verdict);
      } else {
        out.appendChild(element("p", { "class": "caption" }, model.ensemble_note));
      }
    } catch (error) {
      out.appendChild(element("p", { "class": "differs" }, error.message));
    }
  }

  function mount(script) {
    var model = JSON.parse(script.textContent);
    var form = document.getElementById("applicant-form");
    var out = document.getElementById("applicant-result");
    var fields = document.getElementById("applicant-fields");
    model.columns.forEach(function (column) {
      var label = element("label", {});
      label.appendChild(element("span", {}, column.name));
      var input;
      if (column.kind === "category") {
        input = element("select", { name: column.name });
        input.appendChild(element("option", { value: "" }, column.blank === "missing" ? "(missing)" : "(choose)"));
        column.categories.forEach(function (c) { input.appendChild(element("option", { value: c }, c)); });
      } else {
        input = element("input", { name: column.name, type: "text", inputmode: "decimal", placeholder: "blank = missing" });
      }
      label.appendChild(input);
      fields.appendChild(label);
    });
    /* no form submission: MLflow's viewer sandboxes the page without allow-forms */
    document.getElementById("applicant-follow").addEventListener("click", function () {
      show(model, form, out);
    });
    form.addEventListener("keydown", function (event) {
      if (event.key !== "Enter") return;
      event.preventDefault();
      show(model, form, out);
    });
    document.getElementById("applicant-paste-fill").addEventListener("click", function () {
      try {
        var values = parseRow(document.getElementById("applicant-paste").value);
        model.columns.forEach(function (column) {
          if (column.name in values) form.elements[column.name].value = values[column.name].trim();
        });
        show(model, form, out);
      } catch (error) {
        out.textContent = "";
        out.appendChild(element("p", { "class": "differs" }, error.message));
      }
    });
  }

  if (typeof document !== "undefined") {
    var script = document.getElementById("applicant-model");
    if (script) mount(script);
  }
  return { follow: follow, parseRow: parseRow, formatNumber: formatNumber };
})();
