import { EditorView, keymap, placeholder, drawSelection, highlightSpecialChars } from '@codemirror/view';
import { EditorState, Prec } from '@codemirror/state';
import { autocompletion, completionKeymap, closeBrackets, closeBracketsKeymap } from '@codemirror/autocomplete';
import { defaultKeymap, history, historyKeymap, insertNewlineAndIndent } from '@codemirror/commands';
import { HighlightStyle, bracketMatching, syntaxHighlighting } from '@codemirror/language';
import { lintKeymap } from '@codemirror/lint';
import { tags } from '@lezer/highlight';
import { PromQLExtension } from '@prometheus-io/codemirror-promql';

const style = HighlightStyle.define([
  { tag: tags.keyword, color: '#708' },
  { tag: tags.function(tags.variableName), color: '#2a7ab0' },
  { tag: tags.labelName, color: '#a05a00' },
  { tag: tags.string, color: '#0a7d3b' },
  { tag: tags.number, color: '#1750c4' },
  { tag: tags.operator, color: '#9a2b8a' },
  { tag: tags.modifier, color: '#708' },
  { tag: tags.comment, color: '#888', fontStyle: 'italic' },
  { tag: tags.invalid, color: '#d00' },
]);

// newEditor is the PromQL editor: highlighting, linting and completion of
// functions, metric names, label names and values from the adapter's own
// API. Enter runs the query; Shift-Enter breaks the line.
export function newEditor(parent: HTMLElement, doc: string, run: () => void): EditorView {
  const promql = new PromQLExtension().activateCompletion(true).activateLinter(true).setComplete({
    remote: {
      url: '.',
      // Completion is best effort: a failed lookup leaves the list short.
      httpErrorHandler: () => undefined,
      cache: { maxAge: 60_000 },
    },
  });
  const state = EditorState.create({
    doc,
    extensions: [
      highlightSpecialChars(),
      history(),
      drawSelection(),
      bracketMatching(),
      closeBrackets(),
      autocompletion(),
      syntaxHighlighting(style),
      placeholder('Expression (press Shift+Enter for newlines)'),
      EditorView.lineWrapping,
      promql.asExtension(),
      Prec.highest(
        keymap.of([
          // Enter accepts a completion when the list is open, else runs.
          ...completionKeymap,
          { key: 'Enter', run: () => (run(), true) },
          { key: 'Shift-Enter', run: insertNewlineAndIndent },
        ]),
      ),
      keymap.of([...closeBracketsKeymap, ...defaultKeymap, ...historyKeymap, ...lintKeymap]),
    ],
  });
  return new EditorView({ state, parent });
}
